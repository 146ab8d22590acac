// The panels' front-end: one bundle, three pages (body[data-page]). It renders what the
// extension sends (ToPage) and posts clicks back (FromPage); it computes nothing itself.
import { escapeHtml } from '../extension/src/html';
import { heatAlpha } from '../extension/src/logic';
import type { BytecodeResult, CacheStats, FromPage, Instruction, Profile, ProfileInstruction, ToPage } from '../extension/src/protocol';

declare function acquireVsCodeApi(): { postMessage(msg: FromPage): void; setState(s: unknown): void; getState(): unknown };
const vscode = acquireVsCodeApi();
const app = document.getElementById('app')!;
const page = document.body.dataset.page;

const esc = (s: unknown): string => escapeHtml(String(s));
const hex = (n: number): string => '0x' + n.toString(16).padStart(4, '0');
const heat = heatAlpha;

function el(html: string): HTMLElement {
  const t = document.createElement('template');
  t.innerHTML = html.trim();
  return t.content.firstElementChild as HTMLElement;
}

// ---------------------------------------------------------------- bytecode
let rangesByRow: Map<string, Instruction['range']> = new Map();

function renderBytecode(data: BytecodeResult, colors: number[]): void {
  rangesByRow = new Map();
  app.innerHTML = '';
  const title = data.error ? `<p class="error">${esc(data.error)}</p>` :
    `<h2>${esc(data.name ?? data.cell)}${data.fused ? ' <span class="muted">(fused)</span>' : ''}</h2>`;
  app.appendChild(el(`<div class="header">${title}</div>`));
  if (data.error) return;
  app.appendChild(table(data.instructions, colors, 'main'));
  for (const fn of data.functions ?? []) {
    app.appendChild(el(`<h3>${esc(fn.name)}</h3>`));
    app.appendChild(table(fn.instructions, fn.instructions.map(() => -1), fn.name));
  }
}

function table(instructions: Instruction[], colors: number[], fn: string): HTMLElement {
  const t = el(`<table class="bytecode"><thead><tr><th>address</th><th>instruction</th><th>operands</th>
    <th title="operand-stack depth after the instruction">stack</th><th>type</th><th>source</th></tr></thead><tbody></tbody></table>`);
  const body = t.querySelector('tbody')!;
  instructions.forEach((ins, k) => {
    const id = `${fn}:${ins.offset}`;
    rangesByRow.set(id, ins.range);
    const fused = ins.parts.length > 0;
    const color = colors[k] >= 0 ? ` c${colors[k]}` : '';
    const row = el(`<tr class="ins${color}${fused ? ' fused' : ''}" data-id="${esc(id)}" data-offset="${ins.offset}"
      data-fn="${esc(fn)}" tabindex="0" title="click: show the source">
      <td class="addr">${hex(ins.offset)}</td>
      <td class="op">${fused ? '<span class="toggle">▸</span> ' : ''}${esc(ins.op)}</td>
      <td class="args">${esc(ins.argrepr)}</td><td class="num">${ins.stackDepth}</td>
      <td class="type">${esc(ins.type)}</td><td class="src">${ins.range.start.line + 1}:${ins.range.start.character + 1}</td></tr>`);
    body.appendChild(row);
    ins.parts.forEach((p, j) => {
      const pid = `${id}/part${j}`;
      rangesByRow.set(pid, p.range);
      body.appendChild(el(`<tr class="part hidden" data-id="${esc(pid)}" data-parent="${esc(id)}">
        <td></td><td class="op">↳ ${esc(p.op)}</td><td></td><td></td><td></td>
        <td class="src">${p.range.start.line + 1}:${p.range.start.character + 1}</td></tr>`));
    });
  });
  t.addEventListener('click', (e) => {
    const target = e.target as HTMLElement;
    const row = target.closest('tr[data-id]') as HTMLElement | null;
    if (!row) return;
    const id = row.dataset.id!;
    if (target.classList.contains('toggle')) {
      const open = target.textContent === '▾';
      target.textContent = open ? '▸' : '▾';
      t.querySelectorAll(`tr[data-parent="${CSS.escape(id)}"]`).forEach((r) => r.classList.toggle('hidden', open));
      return;
    }
    const range = rangesByRow.get(id);
    if (range) vscode.postMessage({ type: 'reveal', range });
  });
  return t;
}

function highlight(offsets: number[]): void {
  const set = new Set(offsets);
  let first: HTMLElement | null = null;
  document.querySelectorAll<HTMLElement>('tr.ins[data-fn="main"]').forEach((r) => {
    const on = set.has(Number(r.dataset.offset));
    r.classList.toggle('hl', on);
    if (on && !first) first = r;
  });
  (first as HTMLElement | null)?.scrollIntoView({ block: 'nearest' });
}

// ---------------------------------------------------------------- heatmap
function renderHeatmap(p: Profile | null): void {
  app.innerHTML = '';
  if (!p) {
    app.appendChild(el(`<p class="muted">No profile yet: run "msvm: Run with msvm Profiling", debug a program, or run one in a terminal.</p>`));
    return;
  }
  app.appendChild(el(`<div class="header"><h2>JIT heatmap</h2><p class="muted">${esc(p.script)} · ${p.wall_ms.toFixed(1)} ms ·
    ${p.compiles.length} compiles · cache ${((p.cache?.hit_rate ?? p.cache?.rate ?? 0) * 100).toFixed(1)}% hit</p></div>`));
  for (const c of p.codes) {
    app.appendChild(el(`<h3>${esc(c.name)}${c.calls ? ` <span class="muted">${c.calls} calls</span>` : ''}</h3>`));
    const t = el(`<table class="heat"><thead><tr><th>address</th><th>instruction</th><th>line</th><th>compile</th><th>execution</th><th>tiers</th></tr></thead><tbody></tbody></table>`);
    const body = t.querySelector('tbody')!;
    c.instructions.forEach((i: ProfileInstruction) => {
      const row = el(`<tr class="hrow" tabindex="0" data-line="${i.loc[0]}">
        <td class="addr">${hex(i.offset)}</td><td class="op">${esc(i.op)}</td><td class="num">${i.loc[0]}</td>
        <td class="num compile">${i.compile_ms ? i.compile_ms.toFixed(2) + ' ms' : ''}</td>
        <td class="num exec">${i.exec_ns ? (i.exec_ns / 1e3).toFixed(1) + ' µs' : ''}</td>
        <td class="tiers">${i.tiers.map((tr) => `L${tr.level}${tr.source === 'disk' ? ' (disk)' : ''} @${tr.t_ms.toFixed(0)} ms`).join(', ')}</td></tr>`);
      // CSSOM, not style attributes: the page's CSP allows no inline styles
      (row.querySelector('td.compile') as HTMLElement).style.background = `rgba(228, 87, 46, ${heat(i.compile_share).toFixed(3)})`;
      (row.querySelector('td.exec') as HTMLElement).style.background = `rgba(59, 125, 216, ${heat(i.exec_share).toFixed(3)})`;
      row.addEventListener('click', () => {
        const [l, col, el_, ec] = i.loc;
        vscode.postMessage({ type: 'reveal', file: c.file,
          range: { start: { line: l - 1, character: col }, end: { line: el_ - 1, character: ec } } });
      });
      body.appendChild(row);
    });
    app.appendChild(t);
  }
  const steps = Object.entries(p.steps_total);
  const max = Math.max(1e-9, ...steps.map(([, v]) => v));
  const st = el(`<div class="steps"><h3>Compile time by step</h3></div>`);
  for (const [k, v] of steps) {
    const step = el(`<div class="step"><span class="label">${esc(k)}</span><span class="bar"></span><span class="num">${v.toFixed(2)} ms</span></div>`);
    (step.querySelector('.bar') as HTMLElement).style.width = `${Math.round(220 * v / max)}px`;
    st.appendChild(step);
  }
  app.appendChild(st);
  const tl = el(`<div class="timeline"><h3>Tier timeline</h3><table><thead><tr><th>t</th><th>region</th><th>tier</th><th>shape</th><th>from</th><th>ms</th></tr></thead><tbody></tbody></table></div>`);
  const t0 = p.compiles.length ? p.compiles[0].time : 0;
  for (const c of p.compiles) {
    tl.querySelector('tbody')!.appendChild(el(`<tr><td class="num">${((c.time - t0) * 1e3).toFixed(1)} ms</td><td>${esc(c.code)} ${hex(c.offset)} ${esc(c.op)}</td>
      <td>L${c.level}</td><td>${esc(JSON.stringify(c.shape))} ${esc(c.dtype)}</td><td>${esc(c.source)}</td><td class="num">${c.ms.toFixed(2)}</td></tr>`));
  }
  app.appendChild(tl);
}

// ---------------------------------------------------------------- cache
function renderCache(s: CacheStats | null): void {
  app.innerHTML = '';
  if (!s) {
    app.appendChild(el(`<p class="muted">No msvm program has reported cache statistics yet.</p>`));
    return;
  }
  const rate = s.rate ?? (s.hits + s.misses ? s.hits / (s.hits + s.misses) : 0);
  app.appendChild(el(`<div class="header"><h2>JIT cache: ${(rate * 100).toFixed(1)}% hit</h2><p class="muted">${s.hits} hits ·
    ${s.misses} misses · ${s.compiles} compiled · ${s.disk_loads} loaded from disk${s.script ? ' · ' + esc(s.script) : ''}</p></div>`));
  const t = el(`<table class="cache"><thead><tr><th>key</th><th>kernel</th><th>shape</th><th>dtype</th><th>tier</th><th>from</th></tr></thead><tbody></tbody></table>`);
  for (const k of s.recent) {
    t.querySelector('tbody')!.appendChild(el(`<tr><td class="key">${esc(k.key)}</td><td>${esc(k.op ?? '')}</td>
      <td>${esc(JSON.stringify(k.shape ?? ''))}</td><td>${esc(k.dtype ?? '')}</td><td>${k.level ? 'L' + k.level : ''}</td><td>${esc(k.source ?? '')}</td></tr>`));
  }
  app.appendChild(t);
}

window.addEventListener('message', (e: MessageEvent<ToPage>) => {
  const m = e.data;
  if (m.type === 'bytecode' && page === 'bytecode') renderBytecode(m.data, m.colors);
  else if (m.type === 'highlight') highlight(m.offsets);
  else if (m.type === 'heatmap' && page === 'heatmap') renderHeatmap(m.profile);
  else if (m.type === 'cache' && page === 'cache') renderCache(m.stats);
});
vscode.postMessage({ type: 'ready' });
