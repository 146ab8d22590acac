// The data the language server and debug adapter send (see msvm_server), and the one
// message union the panels speak. Python computes; the pages only render.

export interface LspPosition { line: number; character: number }
export interface LspRange { start: LspPosition; end: LspPosition }

export interface Instruction {
  offset: number;
  op: string;
  args: unknown[];
  argrepr: string;
  stackDepth: number;
  type: string;
  range: LspRange;
  line: number;
  parts: { op: string; range: LspRange }[];
}

export interface BytecodeResult {
  cell: string | null;
  name?: string;
  instructions: Instruction[];
  text: string;
  functions?: { name: string; instructions: Instruction[] }[];
  fused?: boolean;
  cells?: string[];
  error?: string;
}

export interface ProfileInstruction {
  offset: number;
  op: string;
  argrepr: string;
  loc: [number, number, number, number];
  parts: { op: string; loc: [number, number, number, number] }[];
  exec_ns: number;
  exec_share: number;
  compile_ms: number;
  compile_share: number;
  steps: Record<string, number>;
  tiers: ({ level: number; shape: unknown; source: string; t_ms: number } & Why)[];
  misses?: ({ level: number; count: number } & Why)[];
  l1?: Why[];
}

/** Why a compile, a miss or an L1 decision happened (msvm/reasons.py): a kind and a sentence. */
export interface Why { reason_kind?: string; reason?: string }

export interface Profile {
  version: number;
  script: string;
  wall_ms: number;
  // one entry per Code object announced (id: Code.uid); variants, flag specializations and sub-Cells
  // of one name are separate entries, told apart by label (msvm/profile.py)
  codes: { id?: number | string; name: string; label?: string; program?: number | string; file: string; line: number;
    calls: number; instructions: ProfileInstruction[];
    variants?: ({ variant: number; compile_ms: number; flags?: Record<string, unknown> } & Why)[] }[];
  unlisted_exec_ns?: number;
  compiles: ({ code: string; offset: number; op: string; level: number; shape: unknown; dtype: string; ms: number;
    source: string; time: number; steps: Record<string, number> } & Why)[];
  steps_total: Record<string, number>;
  cache: CacheStats & { hit_rate?: number };
  errors: ({ why?: string; op?: string } & Why)[];
}

export interface CacheKey extends Why { key: string; op?: string; shape?: unknown; dtype?: string; source?: string; level?: number }

export interface CacheStats {
  hits: number;
  misses: number;
  rate?: number;
  compiles: number;
  disk_loads: number;
  recent: CacheKey[];
  pid?: number;
  script?: string;
}

// extension -> page
export type ToPage =
  | { type: 'bytecode'; data: BytecodeResult; uri: string; colors: number[] }
  | { type: 'highlight'; offsets: number[] }
  | { type: 'heatmap'; profile: Profile | null }
  | { type: 'cache'; stats: CacheStats | null };

// page -> extension
export type FromPage =
  | { type: 'ready' }
  | { type: 'reveal'; range: LspRange; file?: string }
  | { type: 'refresh' };
