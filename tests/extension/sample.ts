// Sample data in the shapes the language server sends (see msvm_server/lsp/analysis.py).
import type { BytecodeResult, CacheStats, Instruction, Profile } from '../../extension/src/protocol';

const r = (line: number, c0: number, c1: number) => ({ start: { line, character: c0 }, end: { line, character: c1 } });

export function ins(offset: number, op: string, line: number, parts: Instruction['parts'] = []): Instruction {
  return { offset, op, args: [], argrepr: op === 'LOAD_TENSOR' ? 'x' : '', stackDepth: 1, type: 'Tensor[float32, [x0,y1]]',
    range: r(line, 14, 31), line: line + 1, parts };
}

export const BYTECODE: BytecodeResult = {
  cell: 'DynamicMatmulCell', name: 'DynamicMatmulCell.construct', fused: true, text: '', cells: ['DynamicMatmulCell'],
  instructions: [
    ins(0, 'LOAD_TENSOR', 18), ins(3, 'LOAD_TENSOR', 18),
    ins(6, 'FUSED_MATMUL_BIAS', 18, [{ op: 'MATMUL', range: r(18, 14, 31) }, { op: 'BROADCAST_ADD', range: r(19, 12, 20) }]),
    ins(17, 'BRANCH_IF_SYMBOLIC', 19), ins(22, 'RELU', 20), ins(25, 'RETURN', 21),
  ],
};

export const STATS: CacheStats = { hits: 46, misses: 4, rate: 0.92, compiles: 3, disk_loads: 1,
  recent: [{ key: 'abc123def4567890', op: 'FUSED_MATMUL_RELU', shape: [32, 1024], dtype: 'float32', source: 'compiled',
    reason_kind: 'new_dtype', reason: 'input 0: dtype float32 vs cached float64' }] };

export const PROFILE: Profile = {
  version: 1, script: '/w/examples/bert_layer.py', wall_ms: 812.5,
  codes: [{ id: 3, name: 'Dense.construct', label: 'variant 2', program: 3, file: '/w/examples/bert_layer.py', line: 70, calls: 4, instructions: [
    { offset: 0, op: 'LOAD_TENSOR', argrepr: 'x', loc: [76, 12, 76, 39], parts: [], exec_ns: 1000, exec_share: 0.01,
      compile_ms: 0, compile_share: 0, steps: {}, tiers: [] },
    { offset: 12, op: 'FUSED_MATMUL_BIAS', argrepr: '', loc: [76, 12, 76, 39], parts: [], exec_ns: 90000, exec_share: 0.9,
      compile_ms: 12.5, compile_share: 0.8, steps: { 'Step1 Parse': 1 }, tiers: [{ level: 2, shape: [16, 768], source: 'compiled', t_ms: 40 }] },
  ], variants: [{ variant: 2, compile_ms: 3.5, reason_kind: 'new_shape_class', reason: 'argument x: rank 3 vs cached rank 2' }] }],
  compiles: [{ code: 'Dense.construct', offset: 12, op: 'FUSED_MATMUL_BIAS', level: 2, shape: [16, 768], dtype: 'float32',
    ms: 12.5, source: 'compiled', time: 1000.0, steps: { 'Step1 Parse': 1 }, reason_kind: 'cold',
    reason: 'the first kernel of this site at L2; compiled: cold cache' }],
  steps_total: { 'Step1 Parse': 1, 'Step2 Shape Resolution': 0.1, 'Step3 IR Generation': 0.5, 'Step4 Fusion': 0.3,
    'Step5 Hardware Mapping': 2, 'Step6 Code Generation': 7, 'Step7 Kernel Cache': 1.6 },
  cache: { hits: 10, misses: 2, hit_rate: 0.833, compiles: 1, disk_loads: 0, recent: [] }, errors: [],
};
