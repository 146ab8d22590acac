"""Compile and load: LLVM IR text -> object bytes -> native function address.

One ``Codegen`` per process initializes LLVM once and owns two target machines
(O0 for L2, O3 for L3) and one LLJIT into which each object file is linked as a
library of its own.
The object bytes are what the kernel cache stores; ``load`` accepts bytes from
either a fresh compile or the disk cache. The "magic tuple" (triple, CPU name,
CPU features) identifies the target in every cache key.
"""

from __future__ import annotations

import threading

import llvmlite
import llvmlite.binding as llvm

_lock = threading.Lock()
_instance = None
ON_USE: list = []        # called after each compile and load (build.py: the idle compiler's memory released)

# L3's IR passes. The kernel templates are already vectorized (<W x T>), so the O3 pipeline's
# loop and SLP vectorizers find nothing to do; what L3 needs from the IR passes is folding the
# now-constant dims and strides, loop canonical form and redundancy elimination. This list gives
# kernels as fast as the O3 pipeline at a third to a half of its compile time (bench/jit_bench.py,
# "L3 pipeline"); codegen stays O3 (scheduling, LSR; no FMA contraction: the IR has no fast-math
# flags, see lower.py).
L3_PASSES = ("sroa", "instruction_combine", "simplify_cfg", "loop_simplify", "loop_rotate", "new_gvn",
             "instruction_combine", "aggressive_dce")


class Codegen:
    def __init__(self):
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        self.triple = llvm.get_process_triple()
        self.cpu = llvm.get_host_cpu_name()
        self.features = llvm.get_host_cpu_features().flatten()
        target = llvm.Target.from_triple(self.triple)
        self.tm = {lvl: target.create_target_machine(cpu=self.cpu, features=self.features, opt=lvl,
                                                       reloc="pic", codemodel="jitdefault")
                   for lvl in (0, 3)}
        self.target = target
        self.lljit = None
        self.engines: list = []      # one JIT library (resource tracker) per loaded object, kept for the process
        self.libs = 0                # JIT libraries named so far (msvm_lib<n>)
        self.lock = threading.RLock()        # parsing, passes, codegen (one LLVM context, shared target machines)
        self.load_lock = threading.Lock()    # linking into the LLJIT (ORC), so a load never waits for a compile
        self.version = f"llvmlite-{llvmlite.__version__}-llvm-{'.'.join(map(str, llvm.llvm_version_info))}"

    @property
    def target_id(self) -> str:
        return f"{self.triple}|{self.cpu}|{self.features}"

    def compile(self, ir: str, level: int) -> tuple:
        """IR text -> (object bytes, {step: seconds}). level 2: no IR passes, codegen O0; level 3: the
        L3_PASSES on the IR, codegen O3."""
        with self.lock:          # LLVM's context and target machines are not thread-safe
            out = self._compile(ir, level)
        for f in ON_USE:
            f()
        return out

    def _compile(self, ir: str, level: int) -> tuple:
        import time

        times = {}
        t0 = time.perf_counter()
        # (a context of its own, freed with the module: LLVM's global context keeps every type, constant
        # and name a parsed module made for the process's life; ResNet-50's warm-up left 11 MB more
        # resident compiling its kernels than loading them)
        ctx = llvm.create_context()
        mod = llvm.parse_assembly(ir, context=ctx)
        try:
            mod.triple = self.triple
            mod.verify()
            times["parse"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            if level >= 3:
                self.optimize(mod)
            times["optimize"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            obj = self.tm[3 if level >= 3 else 0].emit_object(mod)
            times["codegen"] = time.perf_counter() - t0
        finally:
            mod.close()
            ctx.close()
        return obj, times

    def optimize(self, mod, pipeline: str = "l3") -> None:
        """Run L3's IR passes on a parsed module; "o3": LLVM's O3 pipeline with its loop and SLP
        vectorizers instead (what ``make bench`` compares L3_PASSES against)."""
        pto = llvm.create_pipeline_tuning_options(speed_level=3)
        if pipeline == "o3":
            pto.loop_vectorization = pto.slp_vectorization = True
            pb = llvm.create_pass_builder(self.tm[3], pto)
            pb.getModulePassManager().run(mod, pb)
            return
        pb = llvm.create_pass_builder(self.tm[3], pto)
        fpm = llvm.create_new_function_pass_manager()
        for p in L3_PASSES:
            getattr(fpm, f"add_{p}_pass")()
        for fn in mod.functions:
            if not fn.is_declaration:
                fpm.run(fn, pb)

    def load(self, obj: bytes, names: list) -> dict:
        """Link an object file into its own JITDylib of one LLJIT; returns {function name: address}.

        Each object gets a library of its own (no shared symbol table; linking one never touches
        code that other threads are running); libm functions resolve from the process."""
        with self.load_lock:
            if self.lljit is None:
                self.lljit = llvm.create_lljit_compiler()
            lib = llvm.JITLibraryBuilder().add_current_process().add_object_img(obj)
            for n in names:
                lib.export_symbol(n)
            self.libs += 1                        # a name per attempt: a failed link keeps its name taken
            tracker = lib.link(self.lljit, f"msvm_lib{self.libs}")
            self.engines.append(tracker)          # kept: dropping the tracker would free the code
            out = {}
            for n in names:
                addr = tracker[n]
                if not addr:
                    raise RuntimeError(f"compiled object has no function {n}")
                out[n] = addr
        for f in ON_USE:
            f()
        return out


def codegen() -> Codegen:
    global _instance
    if _instance is None:
        with _lock:
            if _instance is None:
                _instance = Codegen()
    return _instance
