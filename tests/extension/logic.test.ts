// Unit tests of the extension's pure logic.
import * as assert from 'assert';
import * as fs from 'fs';
import * as path from 'path';
import { cellForLine, colorIndices, heatAlpha, instructionsAtLine, lineColors, linesOf, nonce, parseFromPage,
  programEnv, statusText, statusTooltip, summarize } from '../../extension/src/logic';
import { pageHtml } from '../../extension/src/html';
import { isInside } from '../../extension/src/paths';
import { BYTECODE, STATS } from './sample';

describe('status bar', () => {
  it('shows the hit rate, rounded', () => {
    assert.strictEqual(statusText(STATS), 'JIT Cache: 92% hit');
    assert.strictEqual(statusText({ ...STATS, rate: undefined, hits: 1, misses: 2 }), 'JIT Cache: 33% hit');
    assert.strictEqual(statusText(null), 'JIT Cache: –');
    assert.strictEqual(statusText({ ...STATS, hits: 0, misses: 0 }), 'JIT Cache: –');
    assert.match(statusTooltip(STATS), /46 hits, 4 misses, 3 compiled, 1 loaded from disk/);
  });
});

describe('source <-> instruction links', () => {
  it('a fused instruction covers the lines of all its parts', () => {
    assert.deepStrictEqual(linesOf(BYTECODE.instructions[2]), [18, 19]);
    assert.deepStrictEqual(instructionsAtLine(BYTECODE.instructions, 19), [6, 17]);
    assert.deepStrictEqual(instructionsAtLine(BYTECODE.instructions, 18), [0, 3, 6]);
    assert.deepStrictEqual(instructionsAtLine(BYTECODE.instructions, 99), []);
  });
  it('one colour per source line, the same on both sides', () => {
    const colors = colorIndices(BYTECODE.instructions);
    assert.deepStrictEqual(colors, [0, 0, 0, 1, 2, 3]);
    assert.deepStrictEqual([...lineColors(BYTECODE.instructions)], [[18, 0], [19, 1], [20, 2], [21, 3]]);
    assert.deepStrictEqual(colorIndices(BYTECODE.instructions, 2), [0, 0, 0, 1, 0, 1]);
  });
  it('the Cell for a cursor line is the nearest lens above it', () => {
    const cells = [{ name: 'A', line: 3 }, { name: 'B', line: 20 }];
    assert.strictEqual(cellForLine(cells, 25), 'B');
    assert.strictEqual(cellForLine(cells, 10), 'A');
    assert.strictEqual(cellForLine(cells, 1), undefined);
  });
  it('summarizes', () => {
    assert.strictEqual(summarize(BYTECODE), 'DynamicMatmulCell.construct: 6 instructions (fused)');
    assert.strictEqual(summarize({ ...BYTECODE, error: 'x.py:3:1: boom' }), 'x.py:3:1: boom');
  });
});

describe('messages from pages are checked', () => {
  it('accepts well-formed ones only', () => {
    const range = { start: { line: 1, character: 2 }, end: { line: 1, character: 5 } };
    assert.deepStrictEqual(parseFromPage({ type: 'reveal', range }), { type: 'reveal', range });
    assert.deepStrictEqual(parseFromPage({ type: 'reveal', range, file: '/a.py' }), { type: 'reveal', range, file: '/a.py' });
    assert.deepStrictEqual(parseFromPage({ type: 'ready' }), { type: 'ready' });
    assert.strictEqual(parseFromPage({ type: 'reveal', range: { start: 1 } }), null);
    assert.strictEqual(parseFromPage({ type: 'exec', cmd: 'rm' }), null);
    assert.strictEqual(parseFromPage('reveal'), null);
    const nan = { start: { line: NaN, character: 0 }, end: { line: 1, character: 0 } };
    assert.strictEqual(parseFromPage({ type: 'reveal', range: nan }), null);
    assert.strictEqual(parseFromPage({ type: 'reveal', range: { ...nan, start: { line: -1, character: 0 } } }), null);
  });
});

describe('pages', () => {
  it('have a strict CSP with a nonce', () => {
    const n = nonce();
    assert.match(n, /^[A-Za-z0-9]{32}$/);
    assert.notStrictEqual(n, nonce());
    const html = pageHtml({ title: 'T <x>', script: 'vscode-resource:/main.js', style: 'vscode-resource:/s.css', nonce: n,
      cspSource: 'vscode-resource:', page: 'bytecode' });
    assert.match(html, new RegExp(`script-src 'nonce-${n}'`));
    assert.match(html, /default-src 'none'/);
    assert.match(html, new RegExp(`<script nonce="${n}" src="vscode-resource:/main.js">`));
    assert.ok(!/unsafe-inline|unsafe-eval|https?:/.test(html));
    assert.match(html, /T &lt;x&gt;/);
    const odd = pageHtml({ title: '</title><script>x()</script>', script: 'vscode-resource:/a"><script>x()</script>',
      style: 'vscode-resource:/s.css" onload="x()', nonce: n, cspSource: 'vscode-resource:"><b>', page: 'cache' });
    assert.strictEqual(odd.match(/<script/g)?.length, 1, 'one script element, the page\'s own');
    assert.ok(!/<b>|" onload/.test(odd));
    assert.throws(() => pageHtml({ title: '', script: '', style: '', nonce: `${n}' 'unsafe-inline`, cspSource: '', page: 'cache' }));
  });
  it('the page script parses no HTML: it builds the DOM with createElement and text', () => {
    const src = fs.readFileSync(path.join(__dirname, '..', '..', 'webview', 'main.ts'), 'utf8');
    assert.ok(!/innerHTML|outerHTML|insertAdjacentHTML|document\.write|createContextualFragment|DOMParser/.test(src));
  });
  it('heat is visible but bounded', () => {
    assert.strictEqual(heatAlpha(0), 0);
    assert.ok(heatAlpha(0.01) > 0.08 && heatAlpha(0.01) < 0.1);
    assert.strictEqual(heatAlpha(1), 0.85);
  });
});

describe('program environment from settings', () => {
  it('maps settings to msvm variables', () => {
    assert.deepStrictEqual(programEnv({ jitLevel: 'L2', jitLogLevel: 'DEBUG', enableBytecodeDump: true, enableJitProfile: true,
      enableFusion: false }), { MSVM_JIT_LEVEL: 'L2', MSVM_LOG: 'DEBUG', MSVM_DUMP_BYTECODE: '1', MSVM_PROFILE: '1',
      MSVM_ENABLE_FUSION: '0' });
    assert.deepStrictEqual(programEnv({ jitLevel: 'auto', enableFusion: true }), {});
  });
});

describe('which Python may run in Restricted Mode', () => {
  it('an interpreter inside a workspace folder is the workspace\'s', () => {
    assert.strictEqual(isInside('/w/proj/.venv/bin/python', ['/w/proj']), true);
    assert.strictEqual(isInside('/w/proj/../proj/.venv/bin/python', ['/w/other', '/w/proj/']), true);
    assert.strictEqual(isInside('/w/proj', ['/w/proj']), true);
    assert.strictEqual(isInside('/usr/bin/python3', ['/w/proj']), false);
    assert.strictEqual(isInside('/w/project2/bin/python', ['/w/proj']), false);
    assert.strictEqual(isInside('/w/..proj/bin/python', ['/w']), true);
    assert.strictEqual(isInside('/w/proj/bin/python', []), false);
  });
});
