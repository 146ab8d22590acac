// Which Python runs the servers: msvm.pythonPath, else the Python extension's interpreter,
// else python3; if that Python lacks msvm_server, a venv the extension manages, with the
// Python packages the .vsix carries installed into it.
import * as cp from 'child_process';
import * as fs from 'fs';
import * as path from 'path';
import * as vscode from 'vscode';
import { isInside } from './paths';
import COMMAND from './server-command.json';

/** The servers' arguments after the Python executable (isolated mode: nothing of the workspace on sys.path). */
export const LSP_ARGS: string[] = COMMAND.lsp;
export const DAP_ARGS: string[] = COMMAND.dap;

/** The cwd of every Python the extension starts: its own storage folder, never the workspace. */
export function serverCwd(ctx: vscode.ExtensionContext): string {
  const dir = ctx.globalStorageUri.fsPath;
  fs.mkdirSync(dir, { recursive: true });
  return dir;
}

let cwd: string | undefined;

function run(cmd: string, args: string[], log?: vscode.OutputChannel): Promise<{ code: number; out: string }> {
  return new Promise((resolve) => {
    const p = cp.spawn(cmd, [...COMMAND.run, ...args], { cwd, env: { ...process.env, PYTHONNOUSERSITE: '1' } });
    let out = '';
    p.stdout.on('data', (d) => { out += d; log?.append(String(d)); });
    p.stderr.on('data', (d) => { out += d; log?.append(String(d)); });
    p.on('error', (e) => resolve({ code: -1, out: String(e) }));
    p.on('close', (code) => resolve({ code: code ?? -1, out }));
  });
}

function real(p: string): string {
  try { return fs.realpathSync(p); } catch { return path.resolve(p); }
}

export async function configuredPython(): Promise<string> {
  const fromSettings = vscode.workspace.getConfiguration('msvm').get<string>('pythonPath');
  if (fromSettings) return fromSettings;
  const ext = vscode.extensions.getExtension('ms-python.python');
  if (ext) {
    try {
      const api = await ext.activate();
      const envPath = api?.environments?.getActiveEnvironmentPath?.();
      const env = envPath && await api.environments.resolveEnvironment(envPath);
      const exe = env?.executable?.uri?.fsPath;
      // in Restricted Mode an interpreter inside the workspace (its .venv) is the workspace's code
      if (exe && (vscode.workspace.isTrusted || !isInside(real(exe), (vscode.workspace.workspaceFolders ?? [])
        .map((f) => real(f.uri.fsPath))))) return exe;
    } catch { /* fall through to python3 */ }
  }
  return 'python3';
}

const PROBE = 'import msvm_server.lsp.server, msvm_server.dap.adapter';

/** A Python that can run `-m msvm_server`; installs the bundled packages into a private venv if needed. */
export async function serverPython(ctx: vscode.ExtensionContext, log: vscode.OutputChannel): Promise<string> {
  cwd = serverCwd(ctx);
  const python = await configuredPython();
  if ((await run(python, ['-c', PROBE])).code === 0) return python;
  const bundled = path.join(ctx.extensionPath, 'python');
  const venv = path.join(ctx.globalStorageUri.fsPath, 'venv');
  const venvPython = path.join(venv, process.platform === 'win32' ? 'Scripts/python.exe' : 'bin/python');
  if (fs.existsSync(venvPython) && (await run(venvPython, ['-c', PROBE])).code === 0) return venvPython;
  if (!fs.existsSync(path.join(bundled, 'pyproject.toml'))) {
    throw new Error(`${python} cannot import msvm_server: install msvm ("pip install 'msvm[ide]'") or set msvm.pythonPath`);
  }
  log.appendLine(`[MS] ${python} has no msvm_server: creating ${venv} and installing msvm into it`);
  await vscode.window.withProgress({ location: vscode.ProgressLocation.Notification, title: 'msvm: installing the language server' },
    async () => {
      fs.mkdirSync(ctx.globalStorageUri.fsPath, { recursive: true });
      const base = python === 'python3' || (await run(python, ['-c', 'import venv'])).code === 0 ? python : 'python3';
      if ((await run(base, ['-m', 'venv', venv], log)).code !== 0) throw new Error(`could not create a venv with ${base}`);
      if ((await run(venvPython, ['-m', 'pip', 'install', `${bundled}[ide]`], log)).code !== 0) {
        throw new Error('pip could not install msvm: see the msvm output channel');
      }
    });
  return venvPython;
}
