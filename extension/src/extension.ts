// msvm for VS Code: activation. It connects the pieces — language client, debug adapter,
// panels, status bar, terminal telemetry — and holds no VM logic (that is in Python).
import * as vscode from 'vscode';
import { LanguageClient, LanguageClientOptions, ServerOptions, State } from 'vscode-languageclient/node';
import { programEnv, statusText, statusTooltip } from './logic';
import { BytecodePanel, CachePanel, HeatmapPanel } from './panels';
import type { CacheStats, Profile } from './protocol';
import { DAP_ARGS, LSP_ARGS, serverCwd, serverPython } from './python';

let client: LanguageClient | undefined;
let output: vscode.OutputChannel;

function settings() {
  const c = vscode.workspace.getConfiguration('msvm');
  return {
    jitLevel: c.get<string>('jitLevel', 'auto'), jitLogLevel: c.get<string>('jitLogLevel', 'INFO'),
    enableBytecodeDump: c.get<boolean>('enableBytecodeDump', false), enableJitProfile: c.get<boolean>('enableJitProfile', false),
    enableFusion: c.get<boolean>('enableFusion', true),
  };
}

export async function activate(ctx: vscode.ExtensionContext) {
  output = vscode.window.createOutputChannel('msvm');
  ctx.subscriptions.push(output);
  const status = vscode.window.createStatusBarItem('msvm.cache', vscode.StatusBarAlignment.Right, 100);
  status.name = 'msvm JIT Cache';
  status.command = 'msvm.showCacheDetails';
  status.text = statusText(null);
  status.tooltip = statusTooltip(null);
  status.show();
  ctx.subscriptions.push(status);
  const bytecode = new BytecodePanel(ctx, () => client);
  const heatmap = new HeatmapPanel(ctx);
  const cache = new CachePanel(ctx);

  const onStats = (s: CacheStats) => {
    status.text = statusText(s);
    status.tooltip = statusTooltip(s);
    status.show();
    cache.setStats(s);
  };
  const onProfile = (p: Profile | null) => {
    if (!p) return;
    heatmap.setProfile(p);
    if (p.cache) onStats({ ...p.cache, rate: p.cache.hit_rate ?? p.cache.rate });
  };
  const env = () => programEnv(settings());
  const applyTerminalEnv = () => {
    for (const [k, v] of Object.entries(env())) ctx.environmentVariableCollection.replace(k, v);
  };
  applyTerminalEnv();
  ctx.environmentVariableCollection.description = 'msvm: stream JIT statistics from programs run here to the status bar';

  async function startClient() {
    let python: string;
    try {
      python = await serverPython(ctx, output);
    } catch (e) {
      output.appendLine(`[MS] ${e}`);
      void vscode.window.showErrorMessage(`msvm: ${e instanceof Error ? e.message : e}`);
      return;
    }
    const serverOptions: ServerOptions = { command: python, args: LSP_ARGS,
      options: { cwd: serverCwd(ctx), env: { ...process.env, MSVM_LOG: settings().jitLogLevel } } };
    const clientOptions: LanguageClientOptions = {
      documentSelector: [{ scheme: 'file', language: 'python' }, { scheme: 'untitled', language: 'python' }],
      outputChannel: output,
      initializationOptions: { workspaceTrusted: vscode.workspace.isTrusted, enableFusion: settings().enableFusion },
    };
    client = new LanguageClient('msvm', 'msvm language server', serverOptions, clientOptions);
    client.onNotification('msvm/telemetry', (p: { address: string }) => {
      ctx.environmentVariableCollection.replace('MSVM_TELEMETRY', p.address);
      output.appendLine(`[MS] telemetry channel ${p.address} (terminals get MSVM_TELEMETRY)`);
    });
    client.onNotification('msvm/cacheStats', onStats);
    client.onNotification('msvm/profile', (p: { profile: Profile }) => onProfile(p.profile));
    client.onNotification('msvm/jitEvent', (e: Record<string, unknown>) => {
      if (e.type === 'compile') {
        const how = e.source === 'disk' ? 'loaded' : e.source === 'memory' ? 'found in memory' : 'compiled';
        output.appendLine(`[MS] JIT ${how} ${e.op} (shape=${JSON.stringify(e.shape)}, ` +
          `dtype=${e.dtype}) at L${e.level} in ${Number(e.ms).toFixed(2)}ms, cache key=${String(e.key).slice(0, 12)}...` +
          (e.reason ? ` (${e.reason_kind}: ${e.reason})` : ''));
      } else if (e.type === 'error') {
        output.appendLine(`[MS] JIT L${e.level} compile of ${e.op} failed, staying in L1: ${e.reason ?? e.why}`);
      }
    });
    await client.start();
  }

  ctx.subscriptions.push(
    vscode.commands.registerCommand('msvm.viewBytecode', async (arg?: vscode.Uri | string, cell?: string) => {
      let uri = typeof arg === 'string' ? vscode.Uri.parse(arg) : arg;
      let line: number | undefined;
      const ed = vscode.window.activeTextEditor;
      if (!uri && ed) uri = ed.document.uri;
      // from the editor's context menu the argument is the document: use the cursor's Cell
      if (ed && uri && ed.document.uri.toString() === uri.toString()) line = ed.selection.active.line;
      if (!uri) { void vscode.window.showInformationMessage('msvm: open a Python file to view its bytecode'); return; }
      if (!client) { void vscode.window.showErrorMessage('msvm: the language server is not running (see the msvm output)'); return; }
      await vscode.workspace.openTextDocument(uri);
      await bytecode.show(uri, cell, cell ? undefined : line ?? 0);
    }),
    vscode.commands.registerCommand('msvm.openHeatmap', () => heatmap.show()),
    vscode.commands.registerCommand('msvm.showCacheDetails', () => cache.show()),
    vscode.commands.registerCommand('msvm.restartServer', async () => {
      if (client) { await client.stop(); client = undefined; }
      await startClient();
    }),
    vscode.commands.registerCommand('msvm.runWithProfiling', async (arg?: vscode.Uri) => {
      const uri = arg ?? vscode.window.activeTextEditor?.document.uri;
      if (!uri) return;
      if (!vscode.workspace.isTrusted) {
        void vscode.window.showWarningMessage('msvm: this workspace is not trusted, so msvm does not run its code.');
        return;
      }
      const doc = vscode.workspace.textDocuments.find((d) => d.uri.toString() === uri.toString());
      if (doc?.isDirty) await doc.save();
      const res = await vscode.window.withProgress({ location: vscode.ProgressLocation.Notification,
        title: `msvm: profiling ${vscode.workspace.asRelativePath(uri)}` },
      () => client!.sendRequest<{ status: number | null; profile: Profile | null; error?: string; stdout?: string; stderr?: string }>(
        'msvm/runProfile', { uri: uri.toString(), env: env() }));
      if (res.stdout) output.append(res.stdout);
      if (res.stderr) output.append(res.stderr);
      if (res.error) void vscode.window.showWarningMessage(`msvm: ${res.error}`);
      if (res.profile) { onProfile(res.profile); heatmap.show(); }
    }),
    vscode.workspace.onDidGrantWorkspaceTrust(() => void client?.sendNotification('msvm/setTrusted', { trusted: true })),
    vscode.workspace.onDidChangeConfiguration(async (e) => {
      if (e.affectsConfiguration('msvm.pythonPath')) await vscode.commands.executeCommand('msvm.restartServer');
      if (e.affectsConfiguration('msvm')) { applyTerminalEnv(); void bytecode.refresh(); }
    }),
    // the debugger
    vscode.debug.registerDebugAdapterDescriptorFactory('msvm', {
      async createDebugAdapterDescriptor() {
        const python = await serverPython(ctx, output);
        return new vscode.DebugAdapterExecutable(python, DAP_ARGS, { cwd: serverCwd(ctx) });
      },
    }),
    vscode.debug.registerDebugConfigurationProvider('msvm', {
      resolveDebugConfiguration(_folder, config) {
        if (!vscode.workspace.isTrusted) {
          void vscode.window.showWarningMessage('msvm: this workspace is not trusted, so msvm does not run its code.');
          return undefined;
        }
        if (!config.type && !config.request && !config.name) {
          const ed = vscode.window.activeTextEditor;
          if (ed?.document.languageId !== 'python') return config;
          Object.assign(config, { type: 'msvm', request: 'launch', name: 'msvm: Debug current file', program: ed.document.uri.fsPath });
        }
        if (!config.program) {
          void vscode.window.showErrorMessage('msvm: the launch configuration needs a "program"');
          return undefined;
        }
        const s = settings();
        config.jitLevel = config.jitLevel ?? s.jitLevel;
        config.enableFusion = config.enableFusion ?? s.enableFusion;
        config.env = { ...env(), ...(config.env ?? {}) };
        return config;
      },
    }),
    // DAP's steps name a thread, not a frame: the adapter is told which frame the user selects
    // (a step with a Python frame below a Cell selected steps that Python frame)
    vscode.debug.onDidChangeActiveStackItem((item) => {
      if (!(item instanceof vscode.DebugStackFrame) || item.session.type !== 'msvm') return;
      Promise.resolve(item.session.customRequest('msvmSelectFrame', { threadId: item.threadId, frameId: item.frameId }))
        .catch(() => undefined);
    }),
    vscode.debug.onDidReceiveDebugSessionCustomEvent((e) => {
      if (e.session.type !== 'msvm') return;
      if (e.event === 'msvm/cacheStats') onStats(e.body as CacheStats);
      else if (e.event === 'msvm/profile') onProfile((e.body as { profile: Profile }).profile);
    }),
  );
  await startClient();
  return { client: () => client, state: () => client?.state === State.Running };
}

export async function deactivate() {
  if (client) await client.stop();
}
