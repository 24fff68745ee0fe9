"""model.py's choose (the sampling rule): greedy, top-k and the top-p nucleus against hand-computed sets. Run: python -m pytest tests/test_sampling.py"""

import torch

from model import choose, nucleus


def test_the_nucleus_is_the_smallest_likeliest_set_reaching_p():
    probs = torch.tensor([[0.05, 0.5, 0.15, 0.3], [0.97, 0.01, 0.01, 0.01]])  # unsorted, on purpose
    kept = nucleus(probs, 0.85)  # row 0: 0.5, 0.3 (0.8 < 0.85), 0.15 (reaches it); row 1: the one token
    assert torch.equal(kept, torch.tensor([[0.0, 0.5, 0.15, 0.3], [0.97, 0.0, 0.0, 0.0]]))
    assert torch.equal(nucleus(probs, 0.01), torch.tensor([[0.0, 0.5, 0.0, 0.0], [0.97, 0.0, 0.0, 0.0]]))
    assert torch.equal(nucleus(probs, 1.0), probs)


def test_draws_stay_in_the_nucleus_at_its_renormalised_rates():
    logits = torch.log(torch.tensor([[0.05, 0.5, 0.15, 0.3]])).expand(20_000, 4)
    draws = choose(logits, 1.0, top_p=0.85, generator=torch.Generator().manual_seed(0)).flatten()
    rates = torch.bincount(draws, minlength=4) / draws.numel()
    assert rates[0] == 0 and torch.allclose(rates[1:], torch.tensor([0.5, 0.15, 0.3]) / 0.95, atol=0.015)
    assert torch.equal(choose(logits[:2], 0), torch.tensor([[1], [1]]))  # greedy
    top1 = choose(logits, 0.7, top_k=1, generator=torch.Generator().manual_seed(0))
    assert (top1 == 1).all()


def test_a_vanishing_temperature_is_greedy_not_nan():
    """issue 54: logits / 1e-40 overflowed float32 to inf, and the softmax of inf - inf is nan."""
    logits = torch.tensor([[1.0, 3.0, 2.5, -4.0], [0.0, 0.0, 7.0, 1.0]])
    for temperature in (1e-40, 1e-30, 1e-8):
        assert choose(logits, temperature, top_k=3).flatten().tolist() == [1, 2]
        assert choose(logits, temperature, top_p=0.5).flatten().tolist() == [1, 2]


def test_a_temperature_too_small_for_float32_is_greedy():
    """1e-300 and 1e-320 (a subnormal double) are 0 in float32: their limit, the argmax, not a division by 0."""
    logits = torch.tensor([[0.5, 2.0, -1.0], [3.0, 1.0, 2.9]])
    for t in (1e-300, 1e-320, 0.0):
        assert choose(logits, t).tolist() == [[1], [0]]
