// The msvm debug adapter driven by a real DAP client (@vscode/debugadapter-testsupport),
// the adapter in its own process. Every wait is on an event, never a sleep. These are msvm
// alone ("pythonDebugging": false); python.test.js has the session mixed with debugpy.
const assert = require('assert');
const path = require('path');
const fs = require('fs');
const { DebugClient } = require('@vscode/debugadapter-testsupport');

const ROOT = path.resolve(__dirname, '..', '..');
const PYTHON = process.env.MSVM_PYTHON || path.join(ROOT, '.venv', 'bin', 'python');
const ADAPTER = path.join(__dirname, 'adapter.py');
const NESTED = path.join(__dirname, 'programs', 'nested.py');
const lines = fs.readFileSync(NESTED, 'utf8').split('\n');
const lineOf = (text) => lines.findIndex((l) => l.includes(text)) + 1;

describe('msvm debug adapter', function () {
  this.timeout(60000);
  let dc;

  beforeEach(async () => {
    dc = new DebugClient(PYTHON, ADAPTER, 'msvm', { env: { ...process.env, MSVM_CACHE_DIR: fs.mkdtempSync('/tmp/msvm-dap-k-') } });
    dc.defaultTimeout = 30000;      // a loaded CI machine may take seconds to start Python with numpy and LLVM
    await dc.start();
  });
  afterEach(async () => { await dc.stop(); });

  const launch = (extra = {}) => ({ program: NESTED, jitLevel: 'L1', pythonDebugging: false, ...extra });

  async function stopOnEntry(extra) {
    const stopped = dc.waitForEvent('stopped');
    await Promise.all([dc.configurationSequence(), dc.launch(launch({ stopOnEntry: true, ...extra }))]);
    const ev = await stopped;
    assert.strictEqual(ev.body.reason, 'entry');
    return ev;
  }

  async function top() {
    const st = await dc.stackTraceRequest({ threadId: 1 });
    return st.body.stackFrames[0];
  }

  it('advertises what the Disassembly view needs', async () => {
    const r = await dc.initializeRequest({ adapterID: 'msvm', linesStartAt1: true, columnsStartAt1: true });
    for (const cap of ['supportsDisassembleRequest', 'supportsSteppingGranularity', 'supportsInstructionBreakpoints',
      'supportsConfigurationDoneRequest']) {
      assert.strictEqual(r.body[cap], true, cap);
    }
  });

  it('stops on entry before the first bytecode instruction', async () => {
    await stopOnEntry();
    const f = await top();
    assert.match(f.name, /^Outer\.construct @0x0000 /);
    assert.strictEqual(f.line, lineOf('h = x + b'));
    assert.ok(f.instructionPointerReference);
    const st = await dc.stackTraceRequest({ threadId: 1 });
    assert.ok(st.body.stackFrames.every((fr) => fr.instructionPointerReference), 'every frame has an instruction pointer');
    const cell = st.body.stackFrames.filter((fr) => !fr.name.endsWith('(Python)'));
    assert.strictEqual(cell.length, 1);
    const py = st.body.stackFrames[st.body.stackFrames.length - 1];
    assert.strictEqual(py.line, lineOf('out = Outer()(x, b)'), 'the Python frame that called the Cell is below it');
  });

  it('instruction steps advance one instruction at a time and agree with disassemble', async () => {
    await stopOnEntry();
    let f = await top();
    const dis = await dc.disassembleRequest({ memoryReference: f.instructionPointerReference, instructionOffset: -3,
      instructionCount: 12, resolveSymbols: true });
    const ins = dis.body.instructions;
    assert.strictEqual(ins.length, 12, 'exactly instructionCount entries');
    assert.deepStrictEqual(ins.slice(0, 3).map((i) => i.presentationHint), ['invalid', 'invalid', 'invalid']);
    assert.strictEqual(ins[3].address, f.instructionPointerReference);
    assert.strictEqual(ins[3].symbol, 'Outer.construct');
    assert.ok(ins[3].location.path.endsWith('nested.py'));
    assert.strictEqual(ins[3].line, lineOf('h = x + b'));
    for (let k = 4; k < 8; k++) {
      const stopped = dc.waitForEvent('stopped');
      await dc.nextRequest({ threadId: 1, granularity: 'instruction' });
      assert.strictEqual((await stopped).body.reason, 'step');
      f = await top();
      assert.strictEqual(f.instructionPointerReference, ins[k].address, `step ${k - 3}`);
      assert.strictEqual(f.line, ins[k].line);
    }
  });

  it('a line breakpoint in construct, then a line step', async () => {
    const line = lineOf('s = self.scale(h)');
    const bpDone = dc.waitForEvent('initialized').then(() => dc.setBreakpointsRequest({
      source: { path: NESTED }, breakpoints: [{ line }, { line: lineOf('import sys') }] }));
    const stopped = dc.waitForEvent('stopped');
    await dc.launch(launch());
    const bps = (await bpDone).body.breakpoints;
    assert.strictEqual(bps[0].verified, true);
    assert.strictEqual(bps[1].verified, false);
    assert.match(bps[1].message, /no msvm bytecode/);
    await dc.configurationDoneRequest();
    const ev = await stopped;
    assert.strictEqual(ev.body.reason, 'breakpoint');
    assert.deepStrictEqual(ev.body.hitBreakpointIds, [bps[0].id]);
    assert.strictEqual((await top()).line, line);
    const next = dc.waitForEvent('stopped');
    await dc.nextRequest({ threadId: 1 });
    await next;
    assert.strictEqual((await top()).line, lineOf('return s - 1.0'), 'next steps over the sub-Cell call');
  });

  it('stepIn enters a sub-Cell and stepOut returns', async () => {
    await stopOnEntry();
    const bp = await dc.setBreakpointsRequest({ source: { path: NESTED }, breakpoints: [{ line: lineOf('s = self.scale(h)') }] });
    assert.ok(bp.body.breakpoints[0].verified);
    let stopped = dc.waitForEvent('stopped');
    await dc.continueRequest({ threadId: 1 });
    await stopped;
    // step by instruction to the CALL_CELL, then into it
    for (let k = 0; k < 10; k++) {
      const f = await top();
      if (/CALL_CELL/.test(f.name)) break;
      stopped = dc.waitForEvent('stopped');
      await dc.nextRequest({ threadId: 1, granularity: 'instruction' });
      await stopped;
    }
    assert.match((await top()).name, /CALL_CELL/);
    stopped = dc.waitForEvent('stopped');
    await dc.stepInRequest({ threadId: 1, granularity: 'instruction' });
    await stopped;
    const st = await dc.stackTraceRequest({ threadId: 1 });
    assert.match(st.body.stackFrames[0].name, /^Scale\.construct @0x0000/);
    assert.match(st.body.stackFrames[1].name, /^Outer\.construct .*CALL_CELL/);
    assert.strictEqual(st.body.stackFrames[0].line, lineOf('y = x * 2.0'));
    stopped = dc.waitForEvent('stopped');
    await dc.stepOutRequest({ threadId: 1 });
    await stopped;
    assert.match((await top()).name, /^Outer\.construct/);
  });

  it('variables show locals, the operand stack with shapes, symbols and the JIT state; evaluate works', async () => {
    await stopOnEntry();
    for (let k = 0; k < 2; k++) {   // LOAD x, LOAD b: two tensors on the stack
      const stopped = dc.waitForEvent('stopped');
      await dc.nextRequest({ threadId: 1, granularity: 'instruction' });
      await stopped;
    }
    const f = await top();
    const scopes = (await dc.scopesRequest({ frameId: f.id })).body.scopes;
    assert.deepStrictEqual(scopes.map((s) => s.name), ['Locals', 'Operand stack', 'Metadata stack', 'Symbols', 'JIT']);
    const vars = async (name) => (await dc.variablesRequest({
      variablesReference: scopes.find((s) => s.name === name).variablesReference })).body.variables;
    const locals = await vars('Locals');
    const x = locals.find((v) => v.name === 'x');
    assert.match(x.value, /^Tensor\[float32, \(4, 3\)\] \[0, 1, 2/);
    const fields = (await dc.variablesRequest({ variablesReference: x.variablesReference })).body.variables;
    const get = (n) => fields.find((v) => v.name === n).value;
    assert.strictEqual(get('shape'), '(4, 3)');
    assert.strictEqual(get('dtype'), 'float32');
    assert.strictEqual(get('strides'), '(12, 4)');
    assert.strictEqual(get('device'), 'CPU:0');
    const stack = await vars('Operand stack');
    assert.deepStrictEqual(stack.map((v) => v.value.split(' ')[0] + ' ' + v.value.split(' ')[1]),
      ['Tensor[float32, (4,', 'Tensor[float32, (3,)]']);
    const meta = await vars('Metadata stack');
    assert.strictEqual(meta.length, 2);
    const syms = await vars('Symbols');
    assert.ok(syms.length >= 1 && syms.every((s) => /^\d+$/.test(s.value)));
    const jit = await vars('JIT');
    assert.strictEqual(jit.find((v) => v.name === 'jit_level').value, "'L1'");
    assert.ok(jit.find((v) => v.name === 'tier'));
    const e1 = await dc.evaluateRequest({ expression: 'x.shape', frameId: f.id, context: 'watch' });
    assert.strictEqual(e1.body.result, '(4, 3)');
    const e2 = await dc.evaluateRequest({ expression: 'x[1, :2]', frameId: f.id, context: 'watch' });
    assert.match(e2.body.result, /^Tensor\[float32, \(2,\)\] \[3, 4\]/);
    const sym = syms[0];
    const e3 = await dc.evaluateRequest({ expression: sym.name, frameId: f.id, context: 'watch' });
    assert.strictEqual(e3.body.result, sym.value);
    await assert.rejects(dc.evaluateRequest({ expression: 'x.__class__', frameId: f.id, context: 'watch' }));
    // only what reads: writing files, mapping memory, loading code and huge allocations are refused
    const written = path.join(fs.mkdtempSync('/tmp/msvm-dap-w-'), 'x.npy');
    for (const expression of [`np.save('${written}', x)`, `np.memmap('${written}', mode='w+', shape=(4,))`,
      "np.ctypeslib.load_library('libc', '/lib')", `np.load('${written}', allow_pickle=True)`, 'np.zeros(10**12)',
      "'a' * 10**10", '().__class__.__bases__[0].__subclasses__()', 'np.add(x, 1, out=x)']) {
      await assert.rejects(dc.evaluateRequest({ expression, frameId: f.id, context: 'watch' }),
        /not available in a watch expression|cannot be called|at most/, expression);
    }
    assert.ok(!fs.existsSync(written), 'nothing was written');
    const e4 = await dc.evaluateRequest({ expression: 'float(np.mean(x)) >= 0 and x.sum(axis=0).shape == (3,)',
      frameId: f.id, context: 'watch' });
    assert.strictEqual(e4.body.result, 'True');
  });

  it('an exception inside a Cell stops with its message, then the session terminates', async () => {
    const stopped = dc.waitForEvent('stopped');
    await Promise.all([dc.configurationSequence(), dc.launch(launch({ args: ['--fail'] }))]);
    const ev = await stopped;
    assert.strictEqual(ev.body.reason, 'exception');
    assert.match(ev.body.description, /FILL .* failed in Grow\.construct: MemoryError/);
    const f = await top();
    assert.strictEqual(f.line, lineOf('big = ops.ones((n, n, n), ms.float32)'));
    const info = await dc.exceptionInfoRequest({ threadId: 1 });
    assert.strictEqual(info.body.exceptionId, 'ExecutionError');
    const exited = dc.waitForEvent('exited');
    const terminated = dc.waitForEvent('terminated');
    await dc.continueRequest({ threadId: 1 });
    assert.strictEqual((await exited).body.exitCode, 1);
    await terminated;
  });

  it('program output, the profile and exit reach the client', async () => {
    const out = dc.assertOutput('stdout', 'outer done (4, 3)');
    const profile = dc.waitForEvent('msvm/profile');
    const exited = dc.waitForEvent('exited');
    const terminated = dc.waitForEvent('terminated');
    await Promise.all([dc.configurationSequence(), dc.launch(launch())]);
    await out;
    const p = (await profile).body.profile;
    assert.deepStrictEqual(p.codes.map((c) => c.name).sort(), ['Outer.construct', 'Scale.construct']);
    assert.strictEqual((await exited).body.exitCode, 0);
    await terminated;
  });

  it('cache statistics arrive as msvm/cacheStats while the program runs compiled kernels', async () => {
    const stats = dc.waitForEvent('msvm/cacheStats');
    await Promise.all([dc.configurationSequence(), dc.launch(launch({ jitLevel: 'L2' }))]);
    const s = (await stats).body;
    assert.ok(s.compiles >= 1 && typeof s.rate === 'number' && Array.isArray(s.recent));
    await dc.waitForEvent('terminated');
  });

  it('an instruction breakpoint stops at that address', async () => {
    await stopOnEntry();
    const f = await top();
    const dis = await dc.disassembleRequest({ memoryReference: f.instructionPointerReference, instructionCount: 6 });
    const target = dis.body.instructions[4];
    const r = await dc.customRequest('setInstructionBreakpoints', { breakpoints: [{ instructionReference: target.address }] });
    assert.strictEqual(r.body.breakpoints[0].verified, true);
    const stopped = dc.waitForEvent('stopped');
    await dc.continueRequest({ threadId: 1 });
    const ev = await stopped;
    assert.strictEqual(ev.body.reason, 'instruction breakpoint');
    assert.strictEqual((await top()).instructionPointerReference, target.address);
    const bad = await dc.customRequest('setInstructionBreakpoints', { breakpoints: [{ instructionReference: '0x7' }] });
    assert.strictEqual(bad.body.breakpoints[0].verified, false);
  });

  it('pause stops a running program at its next instruction', async () => {
    const loop = path.join(__dirname, 'programs', 'loop.py');
    await Promise.all([dc.configurationSequence(), dc.launch({ program: loop, jitLevel: 'L1', pythonDebugging: false, env: { LOOP_SECONDS: '60' } })]);
    const stopped = dc.waitForEvent('stopped', 20000);
    await dc.pauseRequest({ threadId: 1 });
    assert.strictEqual((await stopped).body.reason, 'pause');
    assert.match((await top()).name, /^Step\.construct @0x/);
    const terminated = dc.waitForEvent('terminated');
    await dc.terminateRequest({});
    await terminated;
  });

  it('a breakpoint in a one-line construct stops on every call', async () => {
    const loop = path.join(__dirname, 'programs', 'loop.py');
    const line = fs.readFileSync(loop, 'utf8').split('\n').findIndex((l) => l.includes('return ops.tanh')) + 1;
    const bpDone = dc.waitForEvent('initialized').then(() => dc.setBreakpointsRequest({
      source: { path: loop }, breakpoints: [{ line }] }));
    let stopped = dc.waitForEvent('stopped');
    await dc.launch({ program: loop, jitLevel: 'L1', pythonDebugging: false, env: { LOOP_SECONDS: '60' } });
    // verified before Step runs: static analysis compiles it with x's rank assumed (msvm.static)
    assert.strictEqual((await bpDone).body.breakpoints[0].verified, true);
    await dc.configurationDoneRequest();
    for (let call = 0; call < 3; call++) {     // each call is a new frame, even where it reuses the last one's memory
      assert.strictEqual((await stopped).body.reason, 'breakpoint', `call ${call + 1}`);
      assert.strictEqual((await top()).line, line);
      stopped = dc.waitForEvent('stopped', 20000);
      await dc.continueRequest({ threadId: 1 });
    }
    const terminated = dc.waitForEvent('terminated');
    await dc.terminateRequest({});
    await terminated;
  });

  it('a breakpoint in construct of a program whose calls are under the main guard binds before it runs', async () => {
    const article = path.join(__dirname, 'programs', 'article.py');
    const line = fs.readFileSync(article, 'utf8').split('\n').findIndex((l) => l.includes('out = self.matmul(x, y)')) + 1;
    const bpDone = dc.waitForEvent('initialized').then(() => dc.setBreakpointsRequest({
      source: { path: article }, breakpoints: [{ line }] }));
    const stopped = dc.waitForEvent('stopped');
    await dc.launch({ program: article, jitLevel: 'L1', pythonDebugging: false });
    assert.strictEqual((await bpDone).body.breakpoints[0].verified, true);     // msvm.static, nothing ran yet
    await dc.configurationDoneRequest();
    assert.strictEqual((await stopped).body.reason, 'breakpoint');
    assert.strictEqual((await top()).line, line);
    const terminated = dc.waitForEvent('terminated');
    await dc.terminateRequest({});
    await terminated;
  });

  const JITFN = path.join(__dirname, 'programs', 'jitfn.py');

  // launch jitfn.py with a breakpoint on the line holding `text`; resolves at the first stop
  async function stopInJitFn(text, extra = {}) {
    const src = fs.readFileSync(JITFN, 'utf8').split('\n');
    const line = src.findIndex((l) => l.includes(text)) + 1;
    const bpDone = dc.waitForEvent('initialized').then(() => dc.setBreakpointsRequest({
      source: { path: JITFN }, breakpoints: [{ line }] }));
    const stopped = dc.waitForEvent('stopped');
    await dc.launch({ program: JITFN, jitLevel: 'L1', pythonDebugging: false, ...extra });
    assert.strictEqual((await bpDone).body.breakpoints[0].verified, true);
    await dc.configurationDoneRequest();
    assert.strictEqual((await stopped).body.reason, 'breakpoint');
    return line;
  }

  it('a line breakpoint inside a @jit function', async () => {
    const line = await stopInJitFn('return ops.softmax(y, -1)');
    const f = await top();
    assert.strictEqual(f.line, line);
    assert.match(f.name, /scaled_softmax @0x/);
    // fusion forwarded y on the operand stack: the error says so, and `top` is the value
    await assert.rejects(dc.evaluateRequest({ expression: 'y.shape', frameId: f.id, context: 'watch' }),
      /fusion kept it on the operand stack/);
    const e = await dc.evaluateRequest({ expression: 'top.shape', frameId: f.id, context: 'watch' });
    assert.strictEqual(e.body.result, '(2, 5)');
    const again = dc.waitForEvent('stopped');
    await dc.continueRequest({ threadId: 1 });
    assert.strictEqual((await again).body.reason, 'breakpoint', 'the second call stops too');
  });

  it('with enableFusion false every local keeps its value', async () => {
    await stopInJitFn('return ops.softmax(y, -1)', { enableFusion: false });
    const f = await top();
    const e = await dc.evaluateRequest({ expression: 'y.shape', frameId: f.id, context: 'watch' });
    assert.strictEqual(e.body.result, '(2, 5)');
  });

  it('disconnect ends a stopped program and the adapter keeps serving', async () => {
    await stopOnEntry();
    await dc.disconnectRequest({});
    const r = await dc.threadsRequest();
    assert.deepStrictEqual(r.body.threads, []);
  });
});
