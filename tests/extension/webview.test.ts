// The panel pages rendered in headless Chromium with sample data: what they show, and
// that a click posts the right message back to the extension.
import * as assert from 'assert';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { pathToFileURL } from 'url';
import { chromium, type Browser, type Page } from 'playwright-core';
import { nonce } from '../../extension/src/logic';
import { pageHtml } from '../../extension/src/html';
import { at, payload, poison } from './hostile';
import { BYTECODE, PROFILE, STATS } from './sample';

const ROOT = path.resolve(__dirname, '..', '..');
const DIST = path.join(ROOT, 'dist', 'webview');
const ARTIFACTS = path.join(ROOT, 'artifacts');
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';

describe('panel pages in Chromium', function () {
  this.timeout(60000);
  let browser: Browser;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'msvm-pages-'));

  before(async () => {
    assert.ok(fs.existsSync(path.join(DIST, 'main.js')), 'run npm run build first');
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--headless', '--no-sandbox', '--disable-gpu',
      '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'] });
  });
  after(async () => { await browser?.close(); });

  async function open(kind: 'bytecode' | 'heatmap' | 'cache'): Promise<{ page: Page; errors: string[] }> {
    const n = nonce();
    const html = pageHtml({ title: kind, page: kind, nonce: n, cspSource: 'file:',
      script: pathToFileURL(path.join(DIST, 'main.js')).toString(), style: pathToFileURL(path.join(DIST, 'style.css')).toString() });
    const file = path.join(dir, `${kind}.html`);
    fs.writeFileSync(file, html);
    const page = await browser.newPage();
    const errors: string[] = [];
    page.on('pageerror', (e) => errors.push(String(e)));
    page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
    await page.addInitScript(() => {
      (window as any).__posted = [];
      (window as any).__pwned = [];
      (window as any).__violations = [];
      document.addEventListener('securitypolicyviolation', (e) => (window as any).__violations.push(`${e.violatedDirective} ${e.blockedURI}`));
      (window as any).acquireVsCodeApi = () => ({ postMessage: (m: unknown) => (window as any).__posted.push(m),
        setState: () => undefined, getState: () => undefined });
    });
    await page.goto(pathToFileURL(file).toString());
    await page.waitForFunction(() => (window as any).__posted.some((m: any) => m.type === 'ready'));
    return { page, errors };
  }
  // posts a message to the page and resolves once the page has handled it (messages are delivered in order)
  const send = (page: Page, msg: unknown) => page.evaluate((m) => new Promise<void>((resolve) => {
    const done = (e: MessageEvent) => { if (e.data === '__sent') { window.removeEventListener('message', done); resolve(); } };
    window.addEventListener('message', done);
    window.postMessage(m, '*');
    window.postMessage('__sent', '*');
  }), msg);
  const posted = (page: Page) => page.evaluate(() => (window as any).__posted.filter((m: any) => m.type !== 'ready'));
  const shot = async (page: Page, name: string) => {
    fs.mkdirSync(ARTIFACTS, { recursive: true });
    await page.screenshot({ path: path.join(ARTIFACTS, name) });
  };

  it('bytecode: rows, colours, fused parts, highlight, and a click reveals the source', async () => {
    const { page, errors } = await open('bytecode');
    await send(page, { type: 'bytecode', data: BYTECODE, uri: 'file:///w/x.py', colors: [0, 0, 0, 1, 2, 3] });
    const rows = page.locator('tr.ins[data-fn="main"]');
    assert.strictEqual(await rows.count(), 6);
    assert.deepStrictEqual(await rows.locator('td.addr').allTextContents(), ['0x0000', '0x0003', '0x0006', '0x0011', '0x0016', '0x0019']);
    assert.ok((await rows.nth(3).getAttribute('class'))!.includes('c1'));
    const branch = rows.filter({ hasText: 'BRANCH_IF_SYMBOLIC' });
    await branch.click();
    assert.deepStrictEqual(await posted(page), [{ type: 'reveal', range: BYTECODE.instructions[3].range }]);
    // fused: the toggle shows the parts; a part row reveals the part's own range
    const parts = page.locator('tr.part');
    assert.strictEqual(await parts.count(), 2);
    assert.ok(!(await parts.first().isVisible()));
    await rows.nth(2).locator('.toggle').click();
    assert.ok(await parts.first().isVisible());
    await parts.nth(1).click();
    const msgs = await posted(page);
    assert.deepStrictEqual(msgs[msgs.length - 1], { type: 'reveal', range: BYTECODE.instructions[2].parts[1].range });
    await send(page, { type: 'highlight', offsets: [6, 17] });
    assert.deepStrictEqual(await page.locator('tr.hl').evaluateAll((els) => els.map((e) => (e as HTMLElement).dataset.offset)), ['6', '17']);
    await shot(page, 'panel-bytecode.png');
    assert.deepStrictEqual(errors, []);
  });

  it('heatmap: coloured rows, steps, timeline; a click goes to the source', async () => {
    const { page, errors } = await open('heatmap');
    await send(page, { type: 'heatmap', profile: PROFILE });
    const rows = page.locator('tr.hrow');
    assert.strictEqual(await rows.count(), 2);
    const bg = await rows.nth(1).locator('td.compile').evaluate((e) => getComputedStyle(e).backgroundColor);
    assert.match(bg, /rgba\(228, 87, 46, 0\.85\)/);
    const cold = await rows.nth(0).locator('td.compile').evaluate((e) => getComputedStyle(e).backgroundColor);
    assert.match(cold, /, 0\)$|transparent/, 'an instruction that compiled nothing stays uncoloured');
    assert.strictEqual(await page.locator('.step').count(), 7);
    assert.match(await page.locator('.timeline').innerText(), /FUSED_MATMUL_BIAS/);
    assert.match(await page.locator('.timeline').innerText(), /cold: the first kernel of this site at L2; compiled: cold cache/);
    assert.match(await page.locator('.variants').innerText(), /new_shape_class: argument x: rank 3 vs cached rank 2/);
    await rows.nth(1).click();
    assert.deepStrictEqual(await posted(page), [{ type: 'reveal', file: '/w/examples/bert_layer.py',
      range: { start: { line: 75, character: 12 }, end: { line: 75, character: 39 } } }]);
    await shot(page, 'panel-heatmap.png');
    assert.deepStrictEqual(errors, []);
  });

  it('cache: the last keys with shapes and dtypes', async () => {
    const { page, errors } = await open('cache');
    await send(page, { type: 'cache', stats: STATS });
    assert.match(await page.locator('h2').innerText(), /92\.0% hit/);
    const cells = await page.locator('table.cache tbody tr td').allTextContents();
    assert.deepStrictEqual(cells.slice(0, 4), ['abc123def4567890', 'FUSED_MATMUL_RELU', '[32,1024]', 'float32']);
    assert.strictEqual(cells[6], 'new_dtype: input 0: dtype float32 vs cached float64');
    await shot(page, 'panel-cache.png');
    assert.deepStrictEqual(errors, []);
  });

  // ------------------------------------------------------------ hostile strings
  // Programs name Cells, files, kernels and cache keys, and send any JSON they like over
  // telemetry: each field must reach the page as text, never as markup.
  const TAGS = new Set(['DIV', 'H2', 'H3', 'P', 'SPAN', 'TABLE', 'THEAD', 'TBODY', 'TR', 'TH', 'TD']);
  const ATTRS = new Set(['class', 'data-offset', 'data-fn', 'data-line', 'tabindex', 'title', 'style']);

  /** What a page made of a hostile message: stray elements and attributes, its text, what ran. */
  async function inspect(page: Page) {
    return page.evaluate(() => {
      const app = document.getElementById('app')!;
      const stray: string[] = [];
      for (const e of Array.from(app.querySelectorAll('*'))) {
        if (!['DIV', 'H2', 'H3', 'P', 'SPAN', 'TABLE', 'THEAD', 'TBODY', 'TR', 'TH', 'TD'].includes(e.tagName)) stray.push(e.tagName);
        for (const a of Array.from(e.attributes)) stray.push(`${e.tagName}@${a.name}`);
      }
      return { stray, text: app.textContent ?? '', pwned: (window as any).__pwned, violations: (window as any).__violations,
        scripts: document.scripts.length, images: document.images.length };
    });
  }
  function assertInert(r: Awaited<ReturnType<typeof inspect>>, errors: string[]) {
    const bad = r.stray.filter((s) => { const [tag, attr] = s.split('@'); return !TAGS.has(tag) || (attr && !ATTRS.has(attr)); });
    assert.deepStrictEqual(bad, [], 'elements or attributes made from program data');
    assert.strictEqual(r.scripts, 1, 'only the page\'s own script');
    assert.strictEqual(r.images, 0);
    assert.deepStrictEqual(r.pwned, []);
    assert.deepStrictEqual(r.violations, [], 'nothing the CSP had to block');
    assert.deepStrictEqual(errors, []);
  }
  function assertShown(text: string, data: unknown, paths: string[], json: string[] = []) {
    for (const p of paths) assert.ok(text.includes(payload(p)), `${p} is shown literally`);
    for (const p of json) assert.ok(text.includes(JSON.stringify(at(data, p))), `${p} is shown literally, as JSON`);
  }

  it('bytecode: hostile names, operands, types, offsets and ranges stay text', async () => {
    const { page, errors } = await open('bytecode');
    const data = poison({ ...BYTECODE, functions: [{ name: 'helper', instructions: [BYTECODE.instructions[0]] }] }) as typeof BYTECODE;
    const colors = poison([0, 0, 0, 1, 2, 3]);
    await send(page, { type: 'bytecode', data, uri: payload('uri'), colors });
    const r = await inspect(page);
    assertInert(r, errors);
    assertShown(r.text, data, ['name', 'instructions[0].op', 'instructions[0].argrepr', 'instructions[0].type',
      'instructions[0].offset', 'instructions[0].stackDepth', 'instructions[2].parts[1].op', 'functions[0].name',
      'functions[0].instructions[0].op']);
    assert.strictEqual(await page.locator('tr.ins[data-fn="main"]').count(), 6);
    assert.strictEqual(await page.locator('h3').first().getAttribute('class'), null);
    assert.strictEqual(await page.locator('tr.ins').last().getAttribute('data-fn'), payload('functions[0].name'));
    // a hostile highlight and an error message
    await send(page, { type: 'highlight', offsets: poison([6, 17]) });
    await send(page, { type: 'bytecode', data: { ...poison(BYTECODE) as object, error: payload('error') }, uri: 'u', colors: [] });
    const e = await inspect(page);
    assertInert(e, errors);
    assertShown(e.text, {}, ['error']);
    await page.close();
  });

  it('heatmap: a hostile profile (script, names, loc, tiers, steps, compiles) stays text', async () => {
    const { page, errors } = await open('heatmap');
    // the strings and the locs, numbers elsewhere
    const locs = { ...PROFILE, codes: PROFILE.codes.map((c) => ({ ...c, name: payload('name'), file: payload('file'),
      instructions: c.instructions.map((i, k) => ({ ...i, op: payload(`op${k}`), loc: poison(i.loc, `loc${k}`) })) })) };
    await send(page, { type: 'heatmap', profile: locs });
    const l = await inspect(page);
    assertInert(l, errors);
    assertShown(l.text, locs, ['name', 'op0', 'op1', 'loc1[0]']);
    // every leaf
    const profile = poison(PROFILE);
    await send(page, { type: 'heatmap', profile });
    const r = await inspect(page);
    assertInert(r, errors);
    assertShown(r.text, profile, ['script', 'wall_ms', 'codes[0].name', 'codes[0].label', 'codes[0].calls', 'codes[0].instructions[1].op',
      'codes[0].instructions[1].offset', 'codes[0].instructions[1].loc[0]', 'codes[0].instructions[1].compile_ms',
      'codes[0].instructions[1].exec_ns', 'codes[0].instructions[1].tiers[0].level', 'codes[0].instructions[1].tiers[0].t_ms',
      'steps_total.Step1 Parse', 'compiles[0].code', 'compiles[0].op', 'compiles[0].offset', 'compiles[0].level',
      'compiles[0].dtype', 'compiles[0].source', 'compiles[0].ms', 'compiles[0].reason', 'compiles[0].reason_kind',
      'codes[0].variants[0].reason', 'codes[0].variants[0].reason_kind'], ['compiles[0].shape']);
    // a step's name is a key, not a leaf: a hostile one is text too
    await send(page, { type: 'heatmap', profile: { ...PROFILE, steps_total: { [payload('step')]: 1 } } });
    const s = await inspect(page);
    assertInert(s, errors);
    assertShown(s.text, {}, ['step']);
    // records of the wrong types are skipped or shown as text, never a broken page
    await send(page, { type: 'heatmap', profile: { ...PROFILE, codes: [null, 7, { name: 1, calls: 0, instructions: [null,
      { op: 2, loc: 'x', tiers: [null, 'L9'], parts: 3 }] }], compiles: 'x', steps_total: null, cache: 'x' } });
    assert.strictEqual(await page.locator('tr.hrow').count(), 1);
    assert.deepStrictEqual(errors, []);
    // a click on a row whose loc is not numbers reveals nothing
    await send(page, { type: 'heatmap', profile });
    await page.locator('tr.hrow').first().click();
    assert.deepStrictEqual(await posted(page), []);
    await page.close();
  });

  it('cache: hostile telemetry statistics and keys stay text', async () => {
    const { page, errors } = await open('cache');
    const stats = poison({ ...STATS, script: '/w/x.py', recent: [{ ...STATS.recent[0], level: 2 }] });
    await send(page, { type: 'cache', stats });
    const r = await inspect(page);
    assertInert(r, errors);
    assertShown(r.text, stats, ['hits', 'misses', 'compiles', 'disk_loads', 'script', 'recent[0].key', 'recent[0].op',
      'recent[0].dtype', 'recent[0].source', 'recent[0].level', 'recent[0].reason', 'recent[0].reason_kind'],
    ['recent[0].shape']);
    await send(page, { type: 'cache', stats: { hits: 1, recent: [null, 'k', { key: 3 }] } });
    assert.strictEqual(await page.locator('table.cache tbody tr').count(), 1);
    assert.deepStrictEqual(errors, []);
    await page.close();
  });
});
