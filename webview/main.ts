// The panels' front-end: one bundle, three pages (body[data-page]). It renders what the
// extension sends (ToPage) and posts clicks back (FromPage); it computes nothing itself.
//
// Everything in a message may come from a program (Cell and file names, operands, cache
// keys, telemetry sent by any process), so the page builds its DOM with createElement and
// text nodes only: no HTML is ever parsed from data, and a value of the wrong type is shown
// as text rather than breaking the page.
import { heatAlpha } from '../extension/src/logic';
import type { BytecodeResult, CacheStats, FromPage, Instruction, LspRange, Profile, ProfileInstruction, ToPage }
  from '../extension/src/protocol';

declare function acquireVsCodeApi(): { postMessage(msg: FromPage): void; setState(s: unknown): void; getState(): unknown };
const vscode = acquireVsCodeApi();
const app = document.getElementById('app')!;
const page = document.body.dataset.page;

// ---------------------------------------------------------------- building blocks
type Child = Node | string | number | null | undefined | false;
interface Props { class?: string; title?: string; tabindex?: number; data?: Record<string, string> }

/** An element with the given properties and children; strings become text nodes. */
function h(tag: string, props: Props = {}, ...children: Child[]): HTMLElement {
  const e = document.createElement(tag);
  if (props.class) e.className = props.class;
  if (props.title) e.title = props.title;
  if (props.tabindex !== undefined) e.tabIndex = props.tabindex;
  for (const [k, v] of Object.entries(props.data ?? {})) e.dataset[k] = v;
  for (const c of children) if (c !== null && c !== undefined && c !== false) e.append(typeof c === 'number' ? String(c) : c);
  return e;
}
const cell = (cls: string, ...children: Child[]): HTMLElement => h('td', { class: cls }, ...children);
function table(cls: string, headers: (string | [string, string])[]): { table: HTMLElement; body: HTMLElement } {
  const body = h('tbody');
  const head = h('tr', {}, ...headers.map((x) => (typeof x === 'string' ? h('th', {}, x) : h('th', { title: x[1] }, x[0]))));
  return { table: h('table', { class: cls }, h('thead', {}, head), body), body };
}

// Numbers are formatted when they are numbers and shown as they came otherwise.
const isNum = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v);
const text = (v: unknown): string => (v === null || v === undefined ? '' : String(v));
const fixed = (v: unknown, digits: number): string => (isNum(v) ? v.toFixed(digits) : text(v));
const hex = (v: unknown): string => (isNum(v) && v >= 0 ? '0x' + Math.trunc(v).toString(16).padStart(4, '0') : text(v));
const oneBased = (v: unknown): string => (isNum(v) ? String(v + 1) : text(v));
const list = <T>(v: T[] | undefined | null): T[] => (Array.isArray(v) ? v : []);
/** The entries of an array of records that are records (a program may send anything). */
const records = <T>(v: T[] | undefined | null): T[] => list(v).filter((x) => !!x && typeof x === 'object');
const json = (v: unknown): string => JSON.stringify(v) ?? '';
const where = (r: LspRange | undefined): string => `${oneBased(r?.start?.line)}:${oneBased(r?.start?.character)}`;
const pct = (rate: unknown): string => (isNum(rate) ? (rate * 100).toFixed(1) : text(rate));
/** "kind: sentence" of a record's reason (msvm/reasons.py), or nothing. */
const why = (r: { reason_kind?: unknown; reason?: unknown }): string =>
  (r.reason_kind || r.reason ? `${text(r.reason_kind)}: ${text(r.reason)}` : '');

// ---------------------------------------------------------------- bytecode
function renderBytecode(data: BytecodeResult, colors: unknown[]): void {
  app.replaceChildren();
  if (data.error) {
    app.append(h('div', { class: 'header' }, h('p', { class: 'error' }, text(data.error))));
    return;
  }
  app.append(h('div', { class: 'header' }, h('h2', {}, text(data.name ?? data.cell), data.fused ? ' ' : null,
    data.fused ? h('span', { class: 'muted' }, '(fused)') : null)));
  app.append(bytecodeTable(records(data.instructions), list(colors), 'main'));
  for (const fn of records(data.functions)) {
    app.append(h('h3', {}, text(fn.name)));
    app.append(bytecodeTable(records(fn.instructions), [], text(fn.name)));
  }
}

function reveal(range: LspRange | undefined, file?: string): void {
  if (range) vscode.postMessage({ type: 'reveal', range, ...(file !== undefined ? { file } : {}) });
}

function bytecodeTable(instructions: Instruction[], colors: unknown[], fn: string): HTMLElement {
  const t = table('bytecode', ['address', 'instruction', 'operands', ['stack', 'operand-stack depth after the instruction'],
    'type', 'source']);
  instructions.forEach((ins, k) => {
    const parts = records(ins.parts);
    const color = colors[k];
    const cls = ['ins', Number.isInteger(color) && (color as number) >= 0 && (color as number) < 8 ? `c${color}` : '',
      parts.length ? 'fused' : ''].filter(Boolean).join(' ');
    const toggle = parts.length ? h('span', { class: 'toggle' }, '▸') : null;
    const tr = h('tr', { class: cls, tabindex: 0, title: 'click: show the source', data: { offset: text(ins.offset), fn } },
    cell('addr', hex(ins.offset)), cell('op', toggle, toggle && ' ', text(ins.op)), cell('args', text(ins.argrepr)),
    cell('num', text(ins.stackDepth)), cell('type', text(ins.type)), cell('src', where(ins.range)));
    const partRows = parts.map((p) => {
      const pr = h('tr', { class: 'part hidden' }, cell(''), cell('op', '↳ ', text(p.op)), cell(''), cell(''), cell(''),
        cell('src', where(p.range)));
      pr.addEventListener('click', () => reveal(p.range));
      return pr;
    });
    tr.addEventListener('click', (e) => {
      if (toggle && e.target === toggle) {
        const open = toggle.textContent === '▾';
        toggle.textContent = open ? '▸' : '▾';
        for (const pr of partRows) pr.classList.toggle('hidden', open);
        return;
      }
      reveal(ins.range);
    });
    t.body.append(tr, ...partRows);
  });
  return t.table;
}

function highlight(offsets: unknown[]): void {
  const set = new Set(list(offsets).map(String));
  let first: HTMLElement | null = null;
  document.querySelectorAll<HTMLElement>('tr.ins[data-fn="main"]').forEach((r) => {
    const on = set.has(r.dataset.offset ?? '');
    r.classList.toggle('hl', on);
    if (on && !first) first = r;
  });
  (first as HTMLElement | null)?.scrollIntoView({ block: 'nearest' });
}

// ---------------------------------------------------------------- heatmap
/** A profile's [line, col, end_line, end_col] (1-based lines) as an LSP range, or nothing if it is not numbers. */
function locRange(loc: unknown): LspRange | undefined {
  if (!Array.isArray(loc) || loc.length < 4 || !loc.slice(0, 4).every((n) => Number.isInteger(n) && n >= 0)) return undefined;
  const [l, col, el, ec] = loc as number[];
  return { start: { line: Math.max(0, l - 1), character: col }, end: { line: Math.max(0, el - 1), character: ec } };
}

function renderHeatmap(p: Profile | null): void {
  app.replaceChildren();
  if (!p) {
    app.append(h('p', { class: 'muted' },
      'No profile yet: run "msvm: Run with msvm Profiling", debug a program, or run one in a terminal.'));
    return;
  }
  const compiles = records(p.compiles);
  app.append(h('div', { class: 'header' }, h('h2', {}, 'JIT heatmap'), h('p', { class: 'muted' },
    `${text(p.script)} · ${fixed(p.wall_ms, 1)} ms · ${compiles.length} compiles · cache ${pct(p.cache?.hit_rate ?? p.cache?.rate ?? 0)}% hit`)));
  for (const c of records(p.codes)) {
    // (one entry per Code that was announced: variants and sub-Cells of one name differ by label)
    const info = [c.label ? text(c.label) : '', c.calls ? `${text(c.calls)} calls` : ''].filter(Boolean).join(' · ');
    app.append(h('h3', {}, text(c.name), info ? ' ' : null, info ? h('span', { class: 'muted' }, info) : null));
    const t = table('heat', ['address', 'instruction', 'line', 'compile', 'execution', 'tiers']);
    records(c.instructions).forEach((i: ProfileInstruction) => {
      const loc = Array.isArray(i.loc) ? i.loc : [];
      const compile = cell('num compile', i.compile_ms ? `${fixed(i.compile_ms, 2)} ms` : '');
      const exec = cell('num exec', i.exec_ns ? `${isNum(i.exec_ns) ? (i.exec_ns / 1e3).toFixed(1) : text(i.exec_ns)} µs` : '');
      const tiers = records(i.tiers).map((tr) => `L${text(tr.level)}${tr.source === 'disk' ? ' (disk)' : ''} @${fixed(tr.t_ms, 0)} ms` +
        (tr.reason_kind ? ` ${text(tr.reason_kind)}` : ''));
      const whys = [...records(i.tiers).map((x) => why(x)), ...records(i.misses).map((m) => `miss ×${text(m.count)} L${text(m.level)} ${why(m)}`),
        ...records(i.l1).map((m) => `L1 ${why(m)}`)].filter(Boolean);
      const tr = h('tr', { class: 'hrow', tabindex: 0, title: whys.join('\n'), data: { line: text(loc[0]) } },
        cell('addr', hex(i.offset)), cell('op', text(i.op)), cell('num', text(loc[0])), compile, exec,
        cell('tiers', tiers.join(', ')));
      // CSSOM, not style attributes: the page's CSP allows no inline styles
      compile.style.background = `rgba(228, 87, 46, ${heatAlpha(Number(i.compile_share)).toFixed(3)})`;
      exec.style.background = `rgba(59, 125, 216, ${heatAlpha(Number(i.exec_share)).toFixed(3)})`;
      const range = locRange(i.loc);
      tr.addEventListener('click', () => reveal(range, typeof c.file === 'string' ? c.file : undefined));
      t.body.append(tr);
    });
    app.append(t.table);
  }
  const steps = p.steps_total && typeof p.steps_total === 'object' ? Object.entries(p.steps_total) : [];
  const max = Math.max(1e-9, ...steps.map(([, v]) => (isNum(v) ? v : 0)));
  const st = h('div', { class: 'steps' }, h('h3', {}, 'Compile time by step'));
  for (const [k, v] of steps) {
    const bar = h('span', { class: 'bar' });
    bar.style.width = `${isNum(v) ? Math.round(220 * Math.max(0, v) / max) : 0}px`;
    st.append(h('div', { class: 'step' }, h('span', { class: 'label' }, k), bar, h('span', { class: 'num' }, `${fixed(v, 2)} ms`)));
  }
  app.append(st);
  const tl = table('', ['t', 'region', 'tier', 'shape', 'from', 'ms', 'why']);
  const t0 = compiles.length && isNum(compiles[0].time) ? compiles[0].time : 0;
  for (const c of compiles) {
    tl.body.append(h('tr', {}, cell('num', isNum(c.time) ? `${((c.time - t0) * 1e3).toFixed(1)} ms` : text(c.time)),
      cell('', `${text(c.code)} ${hex(c.offset)} ${text(c.op)}`), cell('', `L${text(c.level)}`),
      cell('', `${json(c.shape)} ${text(c.dtype)}`), cell('', text(c.source)), cell('num', fixed(c.ms, 2)), cell('why', why(c))));
  }
  app.append(h('div', { class: 'timeline' }, h('h3', {}, 'Tier timeline'), tl.table));
  const variants = records(p.codes).flatMap((c) => records(c.variants).map((v) => ({ ...v, code: c.name })));
  if (variants.length) {
    const vt = table('', ['code', 'variant', 'ms', 'why']);
    for (const v of variants) {
      vt.body.append(h('tr', {}, cell('', text(v.code)), cell('num', text(v.variant)), cell('num', fixed(v.compile_ms, 2)),
        cell('why', why(v))));
    }
    app.append(h('div', { class: 'variants' }, h('h3', {}, 'Bytecode compiles'), vt.table));
  }
}

// ---------------------------------------------------------------- cache
function renderCache(s: CacheStats | null): void {
  app.replaceChildren();
  if (!s) {
    app.append(h('p', { class: 'muted' }, 'No msvm program has reported cache statistics yet.'));
    return;
  }
  const counted = isNum(s.hits) && isNum(s.misses) ? s.hits + s.misses : 0;
  const rate = s.rate ?? (counted ? (s.hits as number) / counted : 0);
  app.append(h('div', { class: 'header' }, h('h2', {}, `JIT cache: ${pct(rate)}% hit`), h('p', { class: 'muted' },
    `${text(s.hits)} hits · ${text(s.misses)} misses · ${text(s.compiles)} compiled · ${text(s.disk_loads)} loaded from disk` +
    (s.script ? ` · ${text(s.script)}` : ''))));
  const t = table('cache', ['key', 'kernel', 'shape', 'dtype', 'tier', 'from', 'why']);
  for (const k of records(s.recent)) {
    t.body.append(h('tr', {}, cell('key', text(k.key)), cell('', text(k.op)), cell('', json(k.shape ?? '')),
      cell('', text(k.dtype)), cell('', k.level ? `L${text(k.level)}` : ''), cell('', text(k.source)), cell('why', why(k))));
  }
  app.append(t.table);
}

window.addEventListener('message', (e: MessageEvent<ToPage>) => {
  const m = e.data;
  if (!m || typeof m !== 'object') return;
  if (m.type === 'bytecode' && page === 'bytecode') renderBytecode(m.data, m.colors);
  else if (m.type === 'highlight') highlight(m.offsets);
  else if (m.type === 'heatmap' && page === 'heatmap') renderHeatmap(m.profile);
  else if (m.type === 'cache' && page === 'cache') renderCache(m.stats);
});
vscode.postMessage({ type: 'ready' });
