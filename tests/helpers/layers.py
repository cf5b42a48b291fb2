"""Our attention and feed-forward layers' weights copied into torch.nn's reference layers, and random weights."""

import torch


def copy_attention(ours, theirs):
    theirs.in_proj_weight.copy_(ours.in_proj.weight)
    theirs.in_proj_bias.copy_(ours.in_proj.bias)
    theirs.out_proj.weight.copy_(ours.out_proj.weight)
    theirs.out_proj.bias.copy_(ours.out_proj.bias)


def copy_common(ours, theirs, norms):
    theirs.linear1.weight.copy_(ours.ff.up.weight)
    theirs.linear1.bias.copy_(ours.ff.up.bias)
    theirs.linear2.weight.copy_(ours.ff.down.weight)
    theirs.linear2.bias.copy_(ours.ff.down.bias)
    for name in norms:
        getattr(theirs, name).weight.copy_(getattr(ours, name).weight)
        getattr(theirs, name).bias.copy_(getattr(ours, name).bias)


def randomise(module):
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0, 0.2)
