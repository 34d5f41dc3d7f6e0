"""The next token from a step's logits, as transformers' generate chooses it.

The scores are processed by transformers' rules, in its order (`GenerationMixin._get_logits_processor`): the
repetition penalty, then temperature, top-k and top-p; then the most likely token (greedy) or one drawn from the
softmax (sampling). Logits are a few thousand numbers per sequence, so this runs on the host in NumPy: no
MindSpore kernel is needed for any dtype, and each rule is a few lines that can be read against transformers'
(tests compare the processed scores with `LogitsProcessorList`'s on the same logits). Random draws come from NumPy's
generator seeded by `seed`: the same seed gives the same tokens, not torch's tokens.
"""
from __future__ import annotations

import dataclasses

import numpy as np

NEG_INF = -np.inf


@dataclasses.dataclass(frozen=True)
class Sampling:
    """How the next token is chosen. The defaults are greedy decoding."""

    do_sample: bool = False
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    seed: int | None = None

    def __post_init__(self):
        if self.do_sample and not self.temperature > 0:
            raise ValueError(f"temperature must be a positive float, got {self.temperature!r}")
        if self.top_k is not None and (not isinstance(self.top_k, int) or self.top_k < 0):
            raise ValueError(f"top_k must be a non-negative int, got {self.top_k!r}")
        if not 0.0 <= self.top_p <= 1.0:
            raise ValueError(f"top_p must be a float in [0, 1], got {self.top_p!r}")
        if not self.repetition_penalty > 0:
            raise ValueError(f"repetition_penalty must be a positive float, got {self.repetition_penalty!r}")


class TokenChooser:
    """Chooses each step's next tokens (one per sequence) from the logits, with one random generator per call of
    generate."""

    def __init__(self, sampling: Sampling):
        self.sampling = sampling
        self._rng = np.random.default_rng(sampling.seed)

    @property
    def takes_most_likely(self) -> bool:
        """Whether the next token is the most likely one of the logits as they are (greedy, no penalty): what a
        ported block of greedy steps computes."""
        return not self.sampling.do_sample and self.sampling.repetition_penalty == 1.0

    def process(self, scores: np.ndarray, sequences: np.ndarray, padding: np.ndarray | None = None) -> np.ndarray:
        """The scores after the repetition penalty and, when sampling, temperature, top-k and top-p: what
        transformers' logits processors give (float32, [batch, vocab]). `sequences` are the tokens so far,
        `padding` each sequence's number of left-padding positions (which the penalty skips)."""
        s = self.sampling
        scores = np.array(scores, dtype=np.float32)  # a copy: the rules write in place
        if s.repetition_penalty != 1.0:
            scores = repetition_penalty(scores, sequences, s.repetition_penalty, padding)
        if not s.do_sample:
            return scores
        if s.temperature != 1.0:
            scores = scores / np.float32(s.temperature)
        if s.top_k:  # transformers skips top_k=0 (and None)
            scores = top_k(scores, s.top_k)
        if s.top_p < 1.0:
            scores = top_p(scores, s.top_p)
        return scores

    def choose(self, scores: np.ndarray, sequences: np.ndarray, padding: np.ndarray | None = None) -> np.ndarray:
        """The next token of every sequence (int64, [batch])."""
        processed = self.process(scores, sequences, padding)
        if not self.sampling.do_sample:
            return processed.argmax(-1).astype(np.int64)
        probs = softmax(processed)
        # inverse transform: the first token whose cumulative probability exceeds a uniform draw
        draws = self._rng.random(probs.shape[0])
        cumulative = np.cumsum(probs.astype(np.float64), axis=-1)
        cumulative /= cumulative[:, -1:]
        return np.minimum((cumulative <= draws[:, None]).sum(-1), probs.shape[-1] - 1).astype(np.int64)


def repetition_penalty(scores: np.ndarray, sequences: np.ndarray, penalty: float,
                       padding: np.ndarray | None = None) -> np.ndarray:
    """RepetitionPenaltyLogitsProcessor: every token already in the sequence, left padding excepted (generate
    passes the padding lengths as prompt_ignore_length), has its score divided by the penalty if positive,
    multiplied by it if negative; ids beyond the vocabulary are ignored."""
    vocab = scores.shape[-1]
    ids = np.minimum(sequences, vocab)
    if padding is not None:
        ids = np.where(np.arange(ids.shape[1])[None, :] < np.asarray(padding)[:, None], vocab, ids)
    padded = np.concatenate([scores, np.zeros((scores.shape[0], 1), scores.dtype)], axis=1)
    rows = np.arange(scores.shape[0])[:, None]
    seen = padded[rows, ids]
    padded[rows, ids] = np.where(seen < 0, seen * np.float32(penalty), seen / np.float32(penalty))
    return padded[:, :vocab]


def top_k(scores: np.ndarray, k: int, min_tokens_to_keep: int = 1) -> np.ndarray:
    """TopKLogitsWarper: scores below the k-th largest become -inf (ties with it are kept)."""
    k = min(max(k, min_tokens_to_keep), scores.shape[-1])
    kth = -np.partition(-scores, k - 1, axis=-1)[:, k - 1:k]
    return np.where(scores < kth, np.float32(NEG_INF), scores)


def top_p(scores: np.ndarray, p: float, min_tokens_to_keep: int = 1) -> np.ndarray:
    """TopPLogitsWarper: the smallest set of most likely tokens whose probabilities add up to more than p is kept
    (at least min_tokens_to_keep), the others become -inf. Sorted ascending as transformers sorts, so ties fall
    the same way."""
    order = np.argsort(scores, axis=-1, kind="stable")
    ordered = np.take_along_axis(scores, order, axis=-1)
    cumulative = np.cumsum(softmax(ordered), axis=-1)
    remove = cumulative <= (1 - np.float32(p))
    remove[:, -min_tokens_to_keep:] = False
    removed = np.zeros_like(remove)
    np.put_along_axis(removed, order, remove, axis=-1)
    return np.where(removed, np.float32(NEG_INF), scores)


def softmax(scores: np.ndarray) -> np.ndarray:
    shifted = scores - scores.max(-1, keepdims=True)
    e = np.exp(shifted)
    return e / e.sum(-1, keepdims=True)
