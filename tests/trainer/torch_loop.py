"""A plain PyTorch training loop over a TorchScript module, for ScriptModelTest: the initial
parameters, the batches and the optimiser's settings come from the files the test writes; prints
the loss of every step as a JSON list.

    python3 torch_loop.py DIR    (DIR: index.json, params.f32, batches.i64)
"""
import json
import sys

import numpy as np
import torch
import torch.nn.functional as F

folder = sys.argv[1]
index = json.load(open(folder + "/index.json"))
flat = torch.from_numpy(np.fromfile(folder + "/params.f32", dtype=np.float32))
steps, batch, seq = index["steps"], index["batch"], index["seq_len"]
tokens = torch.from_numpy(np.fromfile(folder + "/batches.i64", dtype=np.int64)).view(steps, batch, seq + 1)

torch.set_num_threads(1)
model = torch.jit.load(index["model"])
model.eval()
named = dict(model.named_parameters())
decayed, not_decayed = [], []
with torch.no_grad():
    for p in index["params"]:
        t = named[p["name"]]
        t.copy_(flat[p["offset"]:p["offset"] + p["numel"]].view(t.shape))
        (decayed if p["decay"] else not_decayed).append(t)
opt = torch.optim.AdamW([{"params": decayed, "weight_decay": index["weight_decay"]},
                         {"params": not_decayed, "weight_decay": 0.0}],
                        lr=index["lr"], betas=(index["beta1"], index["beta2"]), eps=index["eps"])
losses = []
for s in range(steps):
    x, y = tokens[s, :, :-1], tokens[s, :, 1:]
    logits = model(x)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(decayed + not_decayed, index["grad_clip"])
    opt.step()
    losses.append(loss.item())
print(json.dumps(losses))
