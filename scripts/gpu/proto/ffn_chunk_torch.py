# Experiment: does splitting an FFN (GEMM+bias -> exact GELU -> GEMM+bias) along M into chunks
# whose intermediate stays in L2 beat the unsplit chain? fp16, M=32768 (batch 256 x seq 128).
import torch, statistics, torch.nn.functional as F
torch.manual_seed(0)
M,H,FF=32768,384,1536
dev='cuda'
x=torch.randn(M,H,device=dev,dtype=torch.float16)
W1=torch.randn(H,FF,device=dev,dtype=torch.float16)*0.05; b1=torch.randn(FF,device=dev,dtype=torch.float16)*0.1
W2=torch.randn(FF,H,device=dev,dtype=torch.float16)*0.05; b2=torch.randn(H,device=dev,dtype=torch.float16)*0.1
out=torch.empty(M,H,device=dev,dtype=torch.float16)
def make(chunks, act):
    cm=M//chunks
    inter=torch.empty(cm,FF,device=dev,dtype=torch.float16)
    def f():
        for c in range(chunks):
            xs=x[c*cm:(c+1)*cm]
            if act=='fused_tanh':
                torch.ops.aten._addmm_activation.out(b1,xs,W1,beta=1,alpha=1,use_gelu=True,out=inter)
            else:
                torch.addmm(b1,xs,W1,out=inter)
                if act=='erf': inter.copy_(F.gelu(inter))
                elif act=='erf_inplace': torch.ops.aten.gelu_(inter)
                elif act=='none': pass
            torch.addmm(b2,inter,W2,out=out[c*cm:(c+1)*cm])
    return f
def timeg(f,iters=200):
    s=torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3): f()
    torch.cuda.current_stream().wait_stream(s)
    g=torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(6): f()
    for _ in range(20): g.replay()
    torch.cuda.synchronize()
    ts=[]
    for _ in range(iters):
        a=torch.cuda.Event(enable_timing=True); b=torch.cuda.Event(enable_timing=True)
        a.record(); g.replay(); b.record(); b.synchronize(); ts.append(a.elapsed_time(b)/6)
    return statistics.median(ts)
for rep in range(2):
  for act in ['none','erf_inplace','fused_tanh']:
    for chunks in [1,2,4,8,16]:
        print(f'rep {rep} act {act:12s} chunks {chunks:2d}: {timeg(make(chunks,act))*1000:.1f} us per FFN', flush=True)
# single pieces unchunked
