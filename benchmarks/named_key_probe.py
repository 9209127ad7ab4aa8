"""Which calls reach a Python kernel for aten::mm / aten::bmm (CUDA key) with the Named
dispatch key excluded thread-locally (at::NoNamesGuard)?  Eager linear/matmul/mm/bmm under
no_grad, inference_mode and grad mode, then a trident.jit function around some of them (call 0
captures and runs Dynamo's graph; calls 1-2 run the version's native program).

    PYTHONPATH=. python benchmarks/named_key_probe.py      # needs CUDA and torch <= 2.12

Output of the H200 run (torch 2.11): results/latest/named_key_probe.txt."""
import torch, warnings
import torch.nn.functional as F
warnings.simplefilter("ignore")
lib = torch.library.Library("aten", "IMPL")
log = []
def probe(name, orig):
    def k(*args):
        log.append((name, "Named" in str(torch._C._dispatch_tls_local_exclude_set())))
        return orig(*args)
    return k
# the kernels the probe stands in for: the out= overloads (not overridden here)
mm_out = lambda a, b: torch.ops.aten.mm.out(a, b, out=torch.empty(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device))
bmm_out = lambda a, b: torch.ops.aten.bmm.out(a, b, out=torch.empty(a.shape[0], a.shape[1], b.shape[2], dtype=a.dtype, device=a.device))
lib.impl("mm", probe("mm", mm_out), "CUDA")
lib.impl("bmm", probe("bmm", bmm_out), "CUDA")
d = "cuda"; bf = torch.bfloat16
H = 256
x3 = torch.randn(1, 1, H, device=d, dtype=bf); x2 = torch.randn(1, H, device=d, dtype=bf)
xl = torch.randn(1, 7, H, device=d, dtype=bf)
w = torch.randn(H, H, device=d, dtype=bf)
q = torch.randn(1, 4, 1, 64, device=d, dtype=bf); kk = torch.randn(1, 4, 64, 9, device=d, dtype=bf)
cases = {
    "mm direct": lambda: torch.mm(x2, w),
    "linear 2d": lambda: F.linear(x2, w),
    "linear 3d (1,1,H)": lambda: F.linear(x3, w),
    "linear 3d (1,7,H)": lambda: F.linear(xl, w),
    "linear last-pos slice": lambda: F.linear(xl[:, -1:, :], w),
    "matmul 4d attn": lambda: torch.matmul(q, kk),
    "bmm direct": lambda: torch.bmm(q[0], kk[0]),
}
for ctx_name, ctx in (("no_grad", torch.no_grad), ("inference_mode", torch.inference_mode), ("grad", torch.enable_grad)):
    for n, f in cases.items():
        log.clear()
        with ctx():
            f()
        print(f"named_probe {ctx_name:15s} {n:25s} {log}")
import trident
for n in ("linear 3d (1,1,H)", "matmul 4d attn", "mm direct"):
    f = trident.jit(lambda fn=cases[n]: fn())
    for i in range(3):
        log.clear()
        with torch.no_grad():
            f()
        print(f"named_probe trident call{i} {n:25s} {log}")
