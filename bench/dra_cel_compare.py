# ruff: noqa  (a comparison run in a scratch venv, not project code: see the docstring)
"""Which CEL library evaluates DRA selectors: the three candidates on the features Kubernetes' DRA
CEL environment needs, and their speed on one selector (docs/dra.md has the figures).

Not a dependency of gpugate (only cel-expr-python is): run it in a scratch venv,

    python3 -m venv /tmp/celtest && /tmp/celtest/bin/pip install common-expression-language==0.10.0 \\
        cel-python==0.5.0 cel-expr-python==0.1.3 && /tmp/celtest/bin/python bench/dra_cel_compare.py
"""
import time

dev = {"driver": "gpu.nvidia.com", "attributes": {"gpu.nvidia.com": {"productName": "NVIDIA A100", "index": 3}},
       "capacity": {"gpu.nvidia.com": {"memory": {"q": "85899345920/1"}}}}
E = 'device.driver == "gpu.nvidia.com" && device.attributes["gpu.nvidia.com"].productName == "NVIDIA A100" && device.attributes["gpu.nvidia.com"].index < 8'
FEATURES = {
  "member call on custom value (q.compareTo(quantity(...)))": 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("1Gi")) == 0',
  "cel.bind": 'cel.bind(d, device.attributes["gpu.nvidia.com"], d.index == 3)',
  "strings ext (lowerAscii)": 'device.attributes["gpu.nvidia.com"].productName.lowerAscii() == "nvidia a100"',
  "missing attribute is an error": 'device.attributes["gpu.nvidia.com"].nope == 1',
}
N = 20000
def report(name, run, feats):
    t = time.perf_counter()
    for _ in range(N): run(E)
    print(f"{name}: {(time.perf_counter()-t)/N*1e6:.1f} us/eval")
    for label, expr in FEATURES.items():
        try:
            print("   ", label, "->", feats(expr))
        except Exception as exc:
            print("   ", label, "-> ERROR", type(exc).__name__, str(exc)[:80])
import cel

ctx = cel.Context(); ctx.add_function("quantity", lambda s: {"q": s}); ctx.add_function("compareTo", lambda a, b: 0)
progs = {}
def rust(e):
    p = progs.get(e) or progs.setdefault(e, cel.compile(e))
    return p.execute({"device": dev})
def rust_f(e):
    c = cel.Context({"device": dev}); c.add_function("quantity", lambda s: {"q": s}); c.add_function("compareTo", lambda a, b: 0)
    return cel.evaluate(e, c)
report("common-expression-language 0.10.0", rust, rust_f)
import celpy

env = celpy.Environment(); cp = {}
d2 = celpy.json_to_cel(dev)
from celpy import celtypes

fn = {"quantity": lambda s: celtypes.MapType({celtypes.StringType("q"): s}), "compareTo": lambda a, b: celtypes.IntType(0)}
def py(e):
    p = cp.get(e) or cp.setdefault(e, env.program(env.compile(e), functions=fn))
    return p.evaluate({"device": d2})
t = time.perf_counter()
for _ in range(2000): py(E)
print(f"cel-python 0.5.0: {(time.perf_counter()-t)/2000*1e6:.1f} us/eval")
for label, expr in FEATURES.items():
    try: print("   ", label, "->", py(expr))
    except Exception as exc: print("   ", label, "-> ERROR", type(exc).__name__, str(exc)[:80])
from cel_expr_python import cel as c2
from cel_expr_python.ext.ext_bindings import ExtBindings
from cel_expr_python.ext.ext_strings import ExtStrings

T = c2.Type; M = T.Map(T.STRING, T.STRING)
fns = [c2.FunctionDecl("quantity", [c2.Overload("q", M, [T.STRING], impl=lambda s: {"q": s})]),
       c2.FunctionDecl("compareTo", [c2.Overload("c", T.INT, [M, M], is_member=True, impl=lambda a, b: 0)])]
env2 = c2.NewEnv(variables={"device": T.Map(T.STRING, T.DYN)}, extensions=[ExtBindings(), ExtStrings()], functions=fns)
ce = {}
def cpp(e):
    p = ce.get(e) or ce.setdefault(e, env2.compile(e))
    v = p.eval(data={"device": dev}); return v.value() if v.type().name() == "BOOL" else f"ERROR {v.value()}"
report("cel-expr-python 0.1.3", cpp, cpp)
