// End to end in a real VS Code: code-server 4.100.3 driven by headless Chromium
// (playwright-core). Installs dist/msvm.vsix into a fresh profile, opens a workspace with
// the examples, and checks what a user sees:
//   1. right-click > "View MS Bytecode" shows BRANCH_IF_SYMBOLIC; clicking it puts the
//      cursor on the `if training:` line;
//   2. a `msvm` debug session steps by instruction in VS Code's Disassembly view;
//   3. after an example runs in a terminal, the status bar shows the cache rate;
//   4. the JIT heatmap opens with coloured rows.
// Screenshots go to artifacts/e2e-*.png. Waits are on the page's state, never fixed sleeps.
//
// With MSVM_E2E_SCENARIO=managed-venv it checks the other way in: no msvm.pythonPath, a
// python3 without msvm — the extension creates its own venv from the Python packages the
// .vsix carries (pip, from the package registry), and the language server comes up.
const assert = require('assert');
const cp = require('child_process');
const fs = require('fs');
const http = require('http');
const net = require('net');
const os = require('os');
const path = require('path');
const { chromium } = require('playwright-core');

const ROOT = path.resolve(__dirname, '..', '..');
const ENTRY = path.join(__dirname, 'node_modules', 'code-server', 'out', 'node', 'entry.js');
const VSIX = path.join(ROOT, 'dist', 'msvm.vsix');
const PYTHON = process.env.MSVM_PYTHON || path.join(ROOT, '.venv', 'bin', 'python');
const ARTIFACTS = path.join(ROOT, 'artifacts');
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const T = 60000;
const MANAGED = process.env.MSVM_E2E_SCENARIO === 'managed-venv';

function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => resolve(port)); });
  });
}

function healthy(port) {
  return new Promise((resolve) => {
    http.get(`http://127.0.0.1:${port}/healthz`, (r) => { r.resume(); resolve(r.statusCode === 200); })
      .on('error', () => resolve(false));
  });
}

async function step(name, fn) {
  const t0 = Date.now();
  process.stdout.write(`  ${name} ... `);
  await fn();
  console.log(`ok (${((Date.now() - t0) / 1000).toFixed(1)} s)`);
}

async function main() {
  assert.ok(fs.existsSync(ENTRY), 'code-server is not installed: run tests/e2e/install.sh');
  assert.ok(fs.existsSync(VSIX), 'no dist/msvm.vsix: run make vsix');
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'msvm-e2e-'));
  const dirs = Object.fromEntries(['home', 'ud', 'ext', 'tmp', 'ws'].map((d) => [d, path.join(scratch, d)]));
  Object.values(dirs).forEach((d) => fs.mkdirSync(d, { recursive: true }));
  for (const f of ['dynamic_matmul.py', 'bert_layer.py']) fs.copyFileSync(path.join(ROOT, 'examples', f), path.join(dirs.ws, f));
  fs.mkdirSync(path.join(dirs.ws, '.vscode'));
  fs.writeFileSync(path.join(dirs.ws, '.vscode', 'settings.json'), JSON.stringify({
    ...(MANAGED ? {} : { 'msvm.pythonPath': PYTHON }), 'workbench.startupEditor': 'none', 'security.workspace.trust.enabled': false,
    'terminal.integrated.defaultProfile.linux': 'bash', 'workbench.tips.enabled': false,
  }, null, 1));
  fs.writeFileSync(path.join(dirs.ws, '.vscode', 'launch.json'), JSON.stringify({ version: '0.2.0', configurations: [
    { type: 'msvm', request: 'launch', name: 'msvm: dynamic_matmul', program: '${workspaceFolder}/dynamic_matmul.py',
      stopOnEntry: true, jitLevel: 'L1' }] }, null, 1));
  const env = { ...process.env, HOME: dirs.home, XDG_CONFIG_HOME: path.join(dirs.home, '.config'),
    XDG_DATA_HOME: path.join(dirs.home, '.local', 'share'), TMPDIR: dirs.tmp, MSVM_CACHE_DIR: path.join(scratch, 'kernels') };
  delete env.MSVM_TELEMETRY;
  const common = ['--user-data-dir', dirs.ud, '--extensions-dir', dirs.ext];
  cp.execFileSync(process.execPath, [ENTRY, '--install-extension', VSIX, ...common], { env, stdio: 'pipe' });
  const port = await freePort();
  const server = cp.spawn(process.execPath, [ENTRY, '--bind-addr', `127.0.0.1:${port}`, '--auth', 'none',
    '--disable-telemetry', '--disable-update-check', '--disable-workspace-trust', ...common, dirs.ws],
  { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let serverLog = '';
  server.stdout.on('data', (d) => { serverLog += d; });
  server.stderr.on('data', (d) => { serverLog += d; });
  let browser;
  let page;
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  const shot = (name) => page.screenshot({ path: path.join(ARTIFACTS, `e2e-${name}.png`) });
  try {
    for (let k = 0; k < 300 && !(await healthy(port)); k++) await new Promise((r) => setTimeout(r, 100));
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--headless', '--no-sandbox', '--disable-gpu',
      '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync',
    ] });
    page = await browser.newPage({ viewport: { width: 1500, height: 950 } });
    page.setDefaultTimeout(T);
    await page.goto(`http://127.0.0.1:${port}/?folder=${encodeURIComponent(dirs.ws)}`);
    await page.locator('.monaco-workbench').waitFor();

    const runCommand = async (title) => {
      // the title bar's command center opens the palette wherever the focus is (a webview or the
      // terminal may swallow F1)
      const center = page.locator('.command-center-center');
      if (await center.isVisible()) await center.click();
      else await page.keyboard.press('F1');
      const input = page.locator('.quick-input-widget input');
      await input.waitFor();
      await input.fill(`>${title}`);
      await page.locator('.quick-input-list .monaco-list-row', { hasText: title }).first().waitFor();
      await page.keyboard.press('Enter');
    };
    const openFile = async (name) => {
      const row = page.locator('.explorer-folders-view .monaco-list-row', { hasText: name }).first();
      const explorerShown = await page.locator('.explorer-folders-view').isVisible();
      if (!explorerShown && await page.locator('.debug-call-stack, .terminal-wrapper').first().isVisible()) {
        await page.locator('.activitybar .action-item a[aria-label^="Explorer"]').click();   // another view replaced it
      }
      await row.click();
      await page.locator('.tab.active', { hasText: name }).waitFor();
    };

    await step('open examples/dynamic_matmul.py; the code lens appears', async () => {
      await openFile('dynamic_matmul.py');
      await page.locator('.view-lines', { hasText: 'class DynamicMatmulCell' }).waitFor();
      await page.locator('.codelens-decoration', { hasText: 'View MS Bytecode' }).first()
        .waitFor({ timeout: MANAGED ? 600000 : 90000 });
    });
    if (MANAGED) {
      const venv = path.join(dirs.ud, 'User', 'globalStorage', 'msvm.msvm', 'venv');
      assert.ok(fs.existsSync(path.join(venv, 'bin', 'python')), `no managed venv at ${venv}`);
      await shot('managed-venv');
      console.log('e2e (managed venv): all passed');
      return;
    }

    await step('right-click > View MS Bytecode; clicking BRANCH_IF_SYMBOLIC moves the cursor to `if training:`', async () => {
      await page.locator('.view-line', { hasText: 'out = self.matmul(x, y)' }).click({ button: 'right' });
      await page.locator('.context-view .action-label', { hasText: 'View MS Bytecode' }).click();
      const frame = page.frameLocator('iframe.webview.ready').frameLocator('iframe#active-frame');
      const row = frame.locator('tr.ins', { hasText: 'BRANCH_IF_SYMBOLIC' });
      await row.waitFor();
      const lines = fs.readFileSync(path.join(dirs.ws, 'dynamic_matmul.py'), 'utf8').split('\n');
      const want = lines.findIndex((l) => l.includes('if training:')) + 1;
      await row.click();
      // the editor's active line number is the cursor's line (the status bar's "Ln" item hides while
      // the webview keeps the focus, so it is not what is checked)
      await page.waitForFunction((ln) => [...document.querySelectorAll('.monaco-editor .line-numbers.active-line-number')]
        .some((e) => e.textContent.trim() === String(ln)), want);
      await shot('bytecode');
    });

    await step('a msvm debug session steps by instruction in the Disassembly view', async () => {
      await page.locator('.view-line', { hasText: 'out = self.matmul(x, y)' }).click();
      await runCommand('Debug: Select and Start Debugging');
      await page.locator('.quick-input-list .monaco-list-row', { hasText: 'msvm: dynamic_matmul' }).first().click();
      const frames = page.locator('.debug-call-stack .monaco-list-row');
      await frames.filter({ hasText: 'DynamicMatmulCell.construct @0x0000' }).first().waitFor({ timeout: 90000 });
      await runCommand('Open Disassembly View');
      const dis = page.locator('.disassembly-view');
      await dis.locator('.monaco-list-row', { hasText: 'LOAD_TENSOR' }).first().waitFor();
      await dis.locator('.monaco-list-row', { hasText: 'LOAD_TENSOR' }).first().click();
      await shot('disassembly-0');
      for (const want of ['@0x0003', '@0x0006']) {      // one instruction per F10
        await page.keyboard.press('F10');
        await frames.filter({ hasText: `DynamicMatmulCell.construct ${want}` }).first().waitFor();
      }
      await dis.locator('.monaco-list-row', { hasText: 'MATMUL' }).first().waitFor();
      await shot('disassembly');
      await page.locator('.debug-toolbar .codicon-debug-stop').click();
      await frames.first().waitFor({ state: 'detached' });
    });

    await step('after an example runs in a terminal, the status bar shows the cache rate', async () => {
      await runCommand('Terminal: Create New Terminal');
      const term = page.locator('.terminal-wrapper.active .xterm');
      await term.waitFor();
      await term.click();
      await page.keyboard.type(`${PYTHON} bert_layer.py\n`);
      const status = page.locator('.statusbar-item', { hasText: /JIT Cache: \d+% hit/ });
      await status.waitFor({ timeout: 120000 });
      assert.match(await status.innerText(), /JIT Cache: \d+% hit/);
      await shot('statusbar');
    });

    await step('the JIT heatmap opens with coloured rows', async () => {
      await runCommand('msvm: Open JIT Heatmap');
      const frame = page.frameLocator('iframe.webview.ready').last().frameLocator('iframe#active-frame');
      await frame.locator('tr.hrow').first().waitFor({ timeout: 90000 });
      const colours = await frame.locator('td.compile').evaluateAll((els) => els.map((e) => getComputedStyle(e).backgroundColor));
      assert.ok(colours.some((c) => /rgba\(228, 87, 46, 0\.[1-9]/.test(c)), `no coloured compile cell in ${colours.join(' ')}`);
      await shot('heatmap');
    });
    await step('"Run with msvm Profiling" profiles the file and the heatmap shows execution times', async () => {
      await openFile('bert_layer.py');
      await runCommand('msvm: Run with msvm Profiling');
      const frame = page.frameLocator('iframe.webview.ready').last().frameLocator('iframe#active-frame');
      await frame.locator('.header', { hasText: 'bert_layer.py' }).waitFor({ timeout: 120000 });
      const execs = await frame.locator('td.exec').evaluateAll((els) => els.map((e) => getComputedStyle(e).backgroundColor));
      assert.ok(execs.some((c) => /rgba\(59, 125, 216, 0\.[1-9]/.test(c)), `no coloured execution cell in ${execs.join(' ')}`);
      await shot('profiling');
    });
    console.log('e2e: all passed');
  } catch (e) {
    if (page) await shot('failure').catch(() => undefined);
    console.error('\n', e);
    console.error('--- code-server log (tail) ---\n' + serverLog.slice(-4000));
    process.exitCode = 1;
  } finally {
    await browser?.close();
    server.kill();
  }
}

main();
