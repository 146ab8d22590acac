// Pure logic of the extension (no vscode import): unit-tested in tests/extension.
import type { BytecodeResult, CacheStats, FromPage, Instruction, LspRange } from './protocol';

/** "JIT Cache: 92% hit" — or a dash before anything was counted. */
export function statusText(stats: CacheStats | null | undefined): string {
  if (!stats || stats.hits + stats.misses === 0) return 'JIT Cache: –';
  const rate = stats.rate ?? stats.hits / (stats.hits + stats.misses);
  return `JIT Cache: ${Math.round(rate * 100)}% hit`;
}

export function statusTooltip(stats: CacheStats | null | undefined): string {
  if (!stats) return 'msvm kernel cache: no msvm program has reported yet';
  return `msvm kernel cache: ${stats.hits} hits, ${stats.misses} misses, ${stats.compiles} compiled, ` +
    `${stats.disk_loads} loaded from disk${stats.script ? ` (${stats.script})` : ''}. Click for the last keys.`;
}

/** The source lines an instruction covers: its own and those of its fused parts (0-based). */
export function linesOf(ins: Instruction): number[] {
  const lines = new Set<number>();
  for (const r of [ins.range, ...ins.parts.map((p) => p.range)]) {
    for (let l = r.start.line; l <= r.end.line; l++) lines.add(l);
  }
  return [...lines].sort((a, b) => a - b);
}

/** Offsets of the instructions whose source covers the (0-based) line, fused parts included. */
export function instructionsAtLine(instructions: Instruction[], line: number): number[] {
  return instructions.filter((i) => linesOf(i).includes(line)).map((i) => i.offset);
}

/** A colour index per instruction, one per distinct source line, as Compiler Explorer does. */
export function colorIndices(instructions: Instruction[], palette = 8): number[] {
  const byLine = new Map<number, number>();
  return instructions.map((i) => {
    const line = i.range.start.line;
    if (!byLine.has(line)) byLine.set(line, byLine.size % palette);
    return byLine.get(line)!;
  });
}

/** Source line -> colour index, for decorating the editor with the same colours. */
export function lineColors(instructions: Instruction[], palette = 8): Map<number, number> {
  const colors = colorIndices(instructions, palette);
  const out = new Map<number, number>();
  instructions.forEach((ins, k) => { if (!out.has(ins.range.start.line)) out.set(ins.range.start.line, colors[k]); });
  return out;
}

/** Heat as an alpha in [0, 0.85]; shares near zero stay visible but faint. */
export function heatAlpha(share: number): number {
  if (!(share > 0)) return 0;
  return Math.min(0.85, 0.08 + share * 1.5);
}

export function nonce(random: () => number = Math.random): string {
  const chars = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
  let s = '';
  for (let i = 0; i < 32; i++) s += chars.charAt(Math.floor(random() * chars.length));
  return s;
}

const isIndex = (n: unknown): boolean => Number.isInteger(n) && (n as number) >= 0;
const isPos = (p: unknown): boolean => !!p && isIndex((p as { line: unknown }).line) &&
  isIndex((p as { character: unknown }).character);
export const isRange = (r: unknown): r is LspRange => !!r && isPos((r as LspRange).start) && isPos((r as LspRange).end);

/** Messages from a page are untrusted input: only well-formed ones pass. */
export function parseFromPage(msg: unknown): FromPage | null {
  if (!msg || typeof msg !== 'object') return null;
  const m = msg as { type?: unknown; range?: unknown; file?: unknown };
  if (m.type === 'ready' || m.type === 'refresh') return { type: m.type };
  if (m.type === 'reveal' && isRange(m.range)) {
    return { type: 'reveal', range: m.range, ...(typeof m.file === 'string' ? { file: m.file } : {}) };
  }
  return null;
}

/** Environment variables a program started by the extension gets from the settings. */
export function programEnv(cfg: { jitLevel?: string; jitLogLevel?: string; enableBytecodeDump?: boolean;
  enableJitProfile?: boolean; enableFusion?: boolean }): Record<string, string> {
  const env: Record<string, string> = {};
  if (cfg.jitLevel && cfg.jitLevel !== 'auto') env.MSVM_JIT_LEVEL = cfg.jitLevel;
  if (cfg.jitLogLevel) env.MSVM_LOG = cfg.jitLogLevel;
  if (cfg.enableBytecodeDump) env.MSVM_DUMP_BYTECODE = '1';
  if (cfg.enableJitProfile) env.MSVM_PROFILE = '1';
  if (cfg.enableFusion === false) env.MSVM_ENABLE_FUSION = '0';
  return env;
}

/** The Cell to show for a cursor line: the one whose lens line is the nearest above. */
export function cellForLine(cells: { name: string; line: number }[], line: number): string | undefined {
  let best: { name: string; line: number } | undefined;
  for (const c of cells) if (c.line <= line && (!best || c.line > best.line)) best = c;
  return best?.name;
}

export function summarize(data: BytecodeResult): string {
  if (data.error) return data.error;
  const n = data.instructions.length + (data.functions ?? []).reduce((a, f) => a + f.instructions.length, 0);
  return `${data.name ?? data.cell}: ${n} instructions${data.fused ? ' (fused)' : ''}`;
}
