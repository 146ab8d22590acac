// End to end in a real VS Code: code-server 4.100.3 driven by headless Chromium
// (playwright-core). Installs dist/msvm.vsix into a fresh profile, opens a workspace with
// the examples, and checks what a user sees:
//   1. right-click > "View MS Bytecode" shows BRANCH_IF_SYMBOLIC; clicking it puts the
//      cursor on the `if training:` line;
//   2. a `msvm` debug session steps by instruction in VS Code's Disassembly view;
//   3. after an example runs in a terminal, the status bar shows the cache rate;
//   4. the JIT heatmap opens with coloured rows;
//   5. "Run with msvm Profiling" fills the heatmap with execution times;
//   6. a mixed session (debugpy for the Python, msvm for the Cell) stops on a Python line,
//      steps into the Cell's bytecode (F11) and back out to the next Python line (Shift+F11).
// It prints the versions it drives first. Screenshots go to artifacts/e2e-*.png; a failing step
// leaves e2e-failure.png (and one named after the step), the code-server log's tail and the
// extension host's logs. Waits are on the page's state, never fixed sleeps.
//
// It drives VS Code the way a keyboard user does wherever VS Code's own widgets are involved:
// menus and quick picks are chosen with the arrow keys and Enter, the debugger is stopped by its
// command. How a browser build delivers a mouse click to a menu item is not part of what is
// tested (Chromium 156.0.8078.114 highlighted the item on click but did not run it). Where only
// a mouse action will do (a row of our own webview, a list row that takes the focus), the step
// checks that the action had its effect and falls back to another way when it did not; the step's
// "ok" line names each fallback taken.
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

let current = 'start-up';
let fallbacks = [];
// a mouse action that did not have its effect, and the way that was taken instead
function fellBack(what) {
  fallbacks.push(what);
}
async function step(name, fn) {
  const t0 = Date.now();
  current = name;
  fallbacks = [];
  process.stdout.write(`  ${name} ... `);
  await fn();
  const notes = fallbacks.length ? ` [fell back: ${fallbacks.join('; ')}]` : '';
  console.log(`ok (${((Date.now() - t0) / 1000).toFixed(1)} s)${notes}`);
}

function packageVersion(dir) {
  try {
    return JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8')).version;
  } catch {
    return 'unknown';
  }
}

// the newest files under `dir` whose path matches `re`, each with its tail
function logTails(dir, re, bytes = 3000) {
  const found = [];
  const walk = (d) => {
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
      const p = path.join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (re.test(p)) found.push(p);
    }
  };
  if (fs.existsSync(dir)) walk(dir);
  return found.map((p) => `--- ${path.relative(dir, p)} (tail) ---\n${fs.readFileSync(p, 'utf8').slice(-bytes)}`).join('\n');
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
      stopOnEntry: true, jitLevel: 'L1' },
    { type: 'msvm', request: 'launch', name: 'msvm: Python and Cell', program: '${workspaceFolder}/dynamic_matmul.py',
      jitLevel: 'L1', pythonDebugging: true }] }, null, 1));
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
    const codeServer = path.join(ENTRY, '..', '..', '..');
    console.log(`e2e${MANAGED ? ' (managed venv)' : ''}: Chromium ${browser.version()} (${CHROMIUM}), `
      + `code-server ${packageVersion(codeServer)} with VS Code ${packageVersion(path.join(codeServer, 'lib', 'vscode'))}, `
      + `playwright-core ${packageVersion(path.dirname(require.resolve('playwright-core/package.json')))}, node ${process.version}`);
    page = await browser.newPage({ viewport: { width: 1500, height: 950 } });
    page.setDefaultTimeout(T);
    await page.goto(`http://127.0.0.1:${port}/?folder=${encodeURIComponent(dirs.ws)}`);
    await page.locator('.monaco-workbench').waitFor();

    // true when `wait(ms)` (a locator's waitFor, a waitForFunction) succeeds within ms; false when it
    // times out, so that the caller can try the other way
    const within = async (ms, wait) => {
      try {
        await wait(ms);
        return true;
      } catch (e) {
        if (e.name === 'TimeoutError') return false;
        throw e;
      }
    };
    const focusIn = (selector) => (ms) => page.waitForFunction(
      (sel) => !!document.activeElement?.closest(sel), selector, { timeout: ms });
    const quickInput = page.locator('.quick-input-widget input');
    const openQuickInput = async () => {
      // the title bar's command center opens the palette wherever the focus is (a webview or the
      // terminal may swallow F1); F1 when the click did not open it
      const center = page.locator('.command-center-center');
      if (await center.isVisible()) await center.click();
      if (!(await within(5000, (ms) => quickInput.waitFor({ timeout: ms })))) {
        fellBack('command center click -> F1');
        await page.keyboard.press('F1');
      }
      await quickInput.waitFor();
    };
    // runs the row of the quick input that shows `label`: fills the input with `text` first (unless
    // it is null: a quick pick a command opened keeps its own prefix), moves the list's focus onto
    // the row with ArrowDown, presses Enter
    const pick = async (text, label) => {
      await quickInput.waitFor();
      if (text !== null) await quickInput.fill(text);
      const rows = page.locator('.quick-input-list .monaco-list-row');
      await rows.filter({ hasText: label }).first().waitFor();
      const focused = page.locator('.quick-input-list .monaco-list-row.focused');
      const n = await rows.count();
      for (let k = 0; (await focused.count()) === 0 || !(await focused.first().innerText()).includes(label); k++) {
        if (k > n) throw new Error(`the quick input never focused "${label}"`);
        await page.keyboard.press('ArrowDown');
      }
      const before = await quickInput.inputValue();
      await page.keyboard.press('Enter');
      // done when the quick input closed, or when the command put a quick pick of its own in it
      await page.waitForFunction((typed) => {
        const w = document.querySelector('.quick-input-widget');
        const i = w?.querySelector('input');
        return !w || getComputedStyle(w).display === 'none' || !i || i.value !== typed;
      }, before);
    };
    const runCommand = async (title) => {
      await openQuickInput();
      await pick(`>${title}`, title);
    };
    // chooses `label` in the open context menu by keyboard: ArrowDown moves the menu's focus over
    // its enabled items (the pointer may already have focused one), Enter runs the focused item
    const chooseMenuItem = async (label) => {
      const menu = page.locator('.context-view .monaco-menu');
      await menu.locator('.action-label', { hasText: label }).first().waitFor();
      const focused = menu.locator('.action-item.focused');
      const n = await menu.locator('.action-item').count();
      for (let k = 0; k <= n; k++) {
        if ((await focused.count()) > 0 && (await focused.first().innerText()).includes(label)) {
          await page.keyboard.press('Enter');
          await menu.waitFor({ state: 'detached' });
          return;
        }
        await page.keyboard.press('ArrowDown');
      }
      throw new Error(`the context menu never focused "${label}"`);
    };
    // opens the editor's context menu on a line: a right-click, or Shift+F10 on the line when the
    // right-click did not open it
    const contextMenuOn = async (line) => {
      await line.click({ button: 'right' });
      const menu = page.locator('.context-view .monaco-menu');
      if (await within(5000, (ms) => menu.waitFor({ timeout: ms }))) return;
      fellBack('right-click -> Shift+F10');
      await line.click();
      await page.keyboard.press('Shift+F10');
      await menu.waitFor();
    };
    const openFile = async (name) => {
      const tab = page.locator('.tab.active', { hasText: name });
      const row = page.locator('.explorer-folders-view .monaco-list-row', { hasText: name }).first();
      const explorerShown = await page.locator('.explorer-folders-view').isVisible();
      if (!explorerShown && await page.locator('.debug-call-stack, .terminal-wrapper').first().isVisible()) {
        await runCommand('View: Show Explorer');   // another view replaced it
      }
      await row.click();
      if (await within(5000, (ms) => tab.waitFor({ timeout: ms }))) return;
      fellBack('explorer click -> Quick Open');
      await openQuickInput();                    // Quick Open by name
      await pick(name, name);
      await tab.waitFor();
    };
    // focuses the active terminal: it has the focus once it is created; a click, or the command,
    // when it has not
    const focusTerminal = async () => {
      const term = page.locator('.terminal-wrapper.active .xterm');
      await term.waitFor();
      const focused = focusIn('.terminal-wrapper.active');
      if (await within(3000, focused)) return;
      fellBack('terminal focus -> click');
      await term.click();
      if (await within(3000, focused)) return;
      fellBack('terminal click -> Terminal: Focus Terminal');
      await runCommand('Terminal: Focus Terminal');
      await focused(T);
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
      await contextMenuOn(page.locator('.view-line', { hasText: 'out = self.matmul(x, y)' }));
      await chooseMenuItem('View MS Bytecode');
      const frame = page.frameLocator('iframe.webview.ready').frameLocator('iframe#active-frame');
      const row = frame.locator('tr.ins', { hasText: 'BRANCH_IF_SYMBOLIC' });
      await row.waitFor();
      const lines = fs.readFileSync(path.join(dirs.ws, 'dynamic_matmul.py'), 'utf8').split('\n');
      const want = lines.findIndex((l) => l.includes('if training:')) + 1;
      // the editor's active line number is the cursor's line (the status bar's "Ln" item hides while
      // the webview keeps the focus, so it is not what is checked)
      const onLine = (ms) => page.waitForFunction((ln) => [...document.querySelectorAll('.monaco-editor .line-numbers.active-line-number')]
        .some((e) => e.textContent.trim() === String(ln)), want, { timeout: ms });
      await row.click();
      if (!(await within(5000, onLine))) {
        fellBack('webview row click -> a dispatched click');
        await row.dispatchEvent('click');        // the page's own handler, without the browser's pointer
        await onLine(T);
      }
      await shot('bytecode');
    });

    await step('a msvm debug session steps by instruction in the Disassembly view', async () => {
      await page.locator('.view-line', { hasText: 'out = self.matmul(x, y)' }).click();
      await runCommand('Debug: Select and Start Debugging');
      await pick(null, 'msvm: dynamic_matmul');
      const frames = page.locator('.debug-call-stack .monaco-list-row');
      await frames.filter({ hasText: 'DynamicMatmulCell.construct @0x0000' }).first().waitFor({ timeout: 90000 });
      await runCommand('Open Disassembly View');
      const dis = page.locator('.disassembly-view');
      await dis.locator('.monaco-list-row', { hasText: 'LOAD_TENSOR' }).first().waitFor();
      // F10 steps by instruction while the Disassembly view has the focus
      const disFocused = focusIn('.disassembly-view');
      await dis.locator('.monaco-list-row', { hasText: 'LOAD_TENSOR' }).first().click();
      if (!(await within(3000, disFocused))) {
        fellBack('Disassembly row click -> focus()');
        await dis.locator('.monaco-list').first().focus();
        await disFocused(T);
      }
      await shot('disassembly-0');
      for (const want of ['@0x0003', '@0x0006']) {      // one instruction per F10
        await page.keyboard.press('F10');
        await frames.filter({ hasText: `DynamicMatmulCell.construct ${want}` }).first().waitFor();
      }
      await dis.locator('.monaco-list-row', { hasText: 'MATMUL' }).first().waitFor();
      await shot('disassembly');
      await runCommand('Debug: Stop');
      await frames.first().waitFor({ state: 'detached' });
    });

    await step('after an example runs in a terminal, the status bar shows the cache rate', async () => {
      await runCommand('Terminal: Create New Terminal');
      await focusTerminal();
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
    await step('a Python line steps into the Cell\'s bytecode (F11) and back out to the next Python line (Shift+F11)', async () => {
      const lines = fs.readFileSync(path.join(dirs.ws, 'dynamic_matmul.py'), 'utf8').split('\n');
      const callLine = lines.findIndex((l) => l.startsWith('out2 = net(')) + 1;
      const nextLine = lines.findIndex((l) => l.startsWith('out3 = net(')) + 1;
      await openFile('dynamic_matmul.py');
      // a Python breakpoint on the line that calls the Cell: Go to Line, then F9
      await page.locator('.view-line', { hasText: 'class DynamicMatmulCell' }).click();
      await page.keyboard.press('Control+G');
      await quickInput.waitFor();
      await quickInput.fill(`:${callLine}`);
      await page.keyboard.press('Enter');
      await page.waitForFunction((ln) => [...document.querySelectorAll('.monaco-editor .line-numbers.active-line-number')]
        .some((e) => e.textContent.trim() === String(ln)), callLine);
      await page.keyboard.press('F9');
      await page.locator('.codicon-debug-breakpoint').first().waitFor();
      await runCommand('Debug: Select and Start Debugging');
      await pick(null, 'msvm: Python and Cell');
      const frames = page.locator('.debug-call-stack .monaco-list-row');
      const top = frames.filter({ has: page.locator('.stack-frame') }).first();
      const atPython = (line) => async () => {
        await page.waitForFunction((ln) => {
          const row = document.querySelector('.debug-call-stack .monaco-list-row .stack-frame');
          return !!row && /<module>/.test(row.textContent) && !/\(Python\)/.test(row.textContent)
            && (row.querySelector('.line-number')?.textContent ?? '').trim().startsWith(`${ln}:`);
        }, line, { timeout: 90000 });
      };
      await atPython(callLine)();
      await shot('mixed-python');
      await page.locator('.debug-toolbar').waitFor();
      await page.keyboard.press('F11');                 // step into the Cell: its first instruction
      await frames.filter({ hasText: 'DynamicMatmulCell.construct @0x0000' }).first().waitFor();
      assert.match(await top.innerText(), /DynamicMatmulCell\.construct @0x0000/);
      await frames.filter({ hasText: '<module> (Python)' }).first().waitFor();   // its Python caller, below
      await shot('mixed-cell');
      await page.keyboard.press('Shift+F11');           // step out: the Python line after the call
      await atPython(nextLine)();
      await shot('mixed-back');
      await runCommand('Debug: Stop');
      await frames.first().waitFor({ state: 'detached' });
    });
    console.log('e2e: all passed');
  } catch (e) {
    const name = `failure-${current.replace(/[^A-Za-z0-9]+/g, '-').slice(0, 40).replace(/-+$/, '')}`;
    if (page) await shot('failure').then(() => shot(name)).catch(() => undefined);
    console.error(`\nstep failed: ${current} (screenshots: artifacts/e2e-failure.png, artifacts/e2e-${name}.png)\n`, e);
    console.error('--- code-server log (tail) ---\n' + serverLog.slice(-4000));
    console.error(logTails(path.join(dirs.ud, 'logs'), /(exthost\.log|msvm[^/]*\.log)$/));
    process.exitCode = 1;
  } finally {
    await browser?.close();
    server.kill();
  }
}

main();
