// The msvm profile page: renders the JSON in #profile-data (see msvm/profile.py). No network.
const data = JSON.parse(document.getElementById('profile-data').textContent);
const esc = s => String(s).replace(/[&<>"]/g, c => ({'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;'}[c]));
const heat = (share, rgb) => `background:rgba(${rgb},${Math.min(0.85, share * 1.5).toFixed(3)})`;
const out = [];
out.push(`<p class="muted">${esc(data.script)} · ${data.wall_ms.toFixed(1)} ms wall · ${data.compiles.length} compiles · cache hit rate ${(100 * (data.cache.hit_rate || 0)).toFixed(1)}%</p>`);
for (const c of data.codes) {
  out.push(`<h2><code>${esc(c.name)}</code> <span class="muted">${esc(c.file || '')}:${c.line} · ${c.calls} calls</span></h2>`);
  out.push('<table><tr><th>offset</th><th>instruction</th><th>operands</th><th>line</th><th>compile</th><th>exec</th><th>tiers</th></tr>');
  for (const i of c.instructions) {
    const parts = i.parts.length ? `<div class="muted">${i.parts.map(p => esc(p.op) + ' @' + p.loc[0]).join(', ')}</div>` : '';
    const tiers = i.tiers.map(t => `L${t.level}${t.source === 'disk' ? '(disk)' : ''}@${t.t_ms.toFixed(0)}ms ${esc(JSON.stringify(t.shape))}`).join('<br>');
    out.push(`<tr><td class="n mono">${i.offset}</td><td class="mono">${esc(i.op)}${parts}</td><td class="mono">${esc(i.argrepr)}</td>` +
      `<td class="n">${i.loc[0]}</td><td class="n" style="${heat(i.compile_share, '228,87,46')}">${i.compile_ms ? i.compile_ms.toFixed(2) + ' ms' : ''}</td>` +
      `<td class="n" style="${heat(i.exec_share, '59,125,216')}">${i.exec_ns ? (i.exec_ns / 1e3).toFixed(1) + ' µs' : ''}</td><td class="mono">${tiers}</td></tr>`);
  }
  out.push('</table>');
}
const st = data.steps_total, max = Math.max(1e-9, ...Object.values(st));
out.push('<h2>Compile time by step</h2><table>');
for (const [k, v] of Object.entries(st)) out.push(`<tr><td>${esc(k)}</td><td class="n">${v.toFixed(3)} ms</td><td><span class="bar" style="width:${(200 * v / max).toFixed(0)}px"></span></td></tr>`);
out.push('</table><h2>Tier history</h2><table><tr><th>t</th><th>region</th><th>tier</th><th>shape</th><th>how</th><th>ms</th></tr>');
for (const c of data.compiles) out.push(`<tr><td class="n">${((c.time - data.compiles[0].time) * 1e3).toFixed(1)} ms</td><td class="mono">${esc(c.code)} @${c.offset} ${esc(c.op)}</td><td>L${c.level}</td><td class="mono">${esc(JSON.stringify(c.shape))} ${esc(c.dtype)}</td><td>${esc(c.source)}</td><td class="n">${c.ms.toFixed(2)}</td></tr>`);
out.push(`</table><h2>Kernel cache</h2><p>${data.cache.hits} hits, ${data.cache.misses} misses, ${data.cache.compiles} compiled, ${data.cache.disk_loads} loaded from disk</p>`);
out.push('<table><tr><th>key</th><th>kernel</th><th>shape</th><th>dtype</th><th>from</th></tr>');
for (const r of data.cache.recent || []) out.push(`<tr><td class="key">${esc(r.key)}</td><td class="mono">${esc(r.op)}</td><td class="mono">${esc(JSON.stringify(r.shape))}</td><td>${esc(r.dtype)}</td><td>${esc(r.source)}</td></tr>`);
out.push('</table>');
if (data.errors.length) out.push('<h2>Errors</h2><ul>' + data.errors.map(e => `<li>${esc(e.op || '')} L${e.level}: ${esc(e.why)}</li>`).join('') + '</ul>');
document.getElementById('report').innerHTML = out.join('\n');
