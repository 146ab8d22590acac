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
      (window as any).acquireVsCodeApi = () => ({ postMessage: (m: unknown) => (window as any).__posted.push(m),
        setState: () => undefined, getState: () => undefined });
    });
    await page.goto(pathToFileURL(file).toString());
    await page.waitForFunction(() => (window as any).__posted.some((m: any) => m.type === 'ready'));
    return { page, errors };
  }
  const send = (page: Page, msg: unknown) => page.evaluate((m) => window.postMessage(m, '*'), msg);
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
    await shot(page, 'panel-cache.png');
    assert.deepStrictEqual(errors, []);
  });
});
