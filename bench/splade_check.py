"""Check the numpy SPLADE-tiny port on LoCoMo turn retrieval, alone (no BM25, no fusion).

Protocol (LoCoMo paper, Table 3): per conversation, every turn is one document
``<speaker>: <text>`` plus the image caption when there is one; each question retrieves within its
own conversation; recall@k is the share of the question's evidence dia_ids found in the top k.
Malformed evidence ids are normalised when they parse (``D8:6; D9:17``, ``D:11:26``, ``D30:05``)
and dropped otherwise, as are ids of turns that do not exist; both are counted in the output.
Reference: RETRIEVAL.md reports R@5/10/25/50 = 55.3 / 64.1 / 72.9 / 79.0 for SPLADE-tiny.

Also measures document encoding throughput (all turns, batched), warm query latency and the
average number of terms per document and per query.

    python -m bench.splade_check [--data PATH] [--min-weight W] [--max-terms N] [--json]

The data set is CC BY-NC 4.0: it is read from its path, never copied into the repository.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path

DEFAULT_DATA = Path("/work/shared/data/locomo10.json")
KS = (5, 10, 25, 50)
_EVIDENCE_ID = re.compile(r"D:?(\d+):0*(\d+)")


def turn_text(turn: dict) -> str:
    """The document for one turn: speaker, text, and the image caption when present."""
    text = f"{turn['speaker']}: {turn.get('text', '')}"
    caption = turn.get("blip_caption")
    return f"{text} {caption}" if caption else text


def conversation_turns(conversation: dict) -> list[dict]:
    """All turns of a conversation in session order."""
    sessions = sorted(
        (int(key.split("_")[1]), turns)
        for key, turns in conversation.items()
        if re.fullmatch(r"session_\d+", key) and isinstance(turns, list)
    )
    return [turn for _, turns in sessions for turn in turns]


def parse_evidence(raw: list[str], known: set[str]) -> tuple[list[str], int]:
    """Normalised evidence ids that exist in the conversation, and how many raw pieces were lost."""
    found: list[str] = []
    dropped = 0
    for item in raw:
        pieces = [p for p in re.split(r"[;,\s]+", item) if p]
        for piece in pieces:
            match = _EVIDENCE_ID.fullmatch(piece)
            dia_id = f"D{match.group(1)}:{match.group(2)}" if match else None
            if dia_id in known and dia_id not in found:
                found.append(dia_id)
            else:
                dropped += 1
    return found, dropped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--min-weight", type=float, default=None)
    parser.add_argument("--max-terms", type=int, default=None, help="prune documents to top N")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--json", action="store_true", help="print the results as one JSON object")
    args = parser.parse_args(argv)

    import numpy as np

    from memcli.providers.splade import MIN_WEIGHT, SpladeEncoder

    samples = json.loads(args.data.read_text(encoding="utf-8"))
    encoder = SpladeEncoder(
        min_weight=MIN_WEIGHT if args.min_weight is None else args.min_weight,
        max_terms=args.max_terms,
    )

    t0 = time.perf_counter()
    encoder.encode_query("warm up")  # loads the weights; not counted in throughput
    load_s = time.perf_counter() - t0

    hits = {k: [] for k in KS}
    doc_terms: list[int] = []
    query_terms: list[int] = []
    query_ms: list[float] = []
    encode_s = 0.0
    n_turns = 0
    dropped_ids = 0
    no_evidence = 0
    for sample in samples:
        turns = conversation_turns(sample["conversation"])
        ids = [t["dia_id"] for t in turns]
        t0 = time.perf_counter()
        docs = encoder.encode_documents([turn_text(t) for t in turns], batch_size=args.batch_size)
        encode_s += time.perf_counter() - t0
        n_turns += len(turns)
        doc_terms.extend(len(d) for d in docs)

        # Inverted index: term -> (doc positions, weights), so a query costs one add per posting.
        postings: dict[int, tuple[list[int], list[float]]] = {}
        for pos, doc in enumerate(docs):
            for term, weight in doc.items():
                entry = postings.setdefault(term, ([], []))
                entry[0].append(pos)
                entry[1].append(weight)
        index = {t: (np.array(p), np.array(w, dtype=np.float32)) for t, (p, w) in postings.items()}

        for qa in sample["qa"]:
            evidence, lost = parse_evidence(qa.get("evidence") or [], set(ids))
            dropped_ids += lost
            if not evidence:
                no_evidence += 1
                continue
            t0 = time.perf_counter()
            query = encoder.encode_query(qa["question"])
            query_ms.append((time.perf_counter() - t0) * 1000)
            query_terms.append(len(query))
            scores = np.zeros(len(docs), dtype=np.float32)
            for term, weight in query.items():
                if term in index:
                    positions, weights = index[term]
                    scores[positions] += weight * weights
            ranked = [ids[i] for i in np.argsort(-scores, kind="stable")[: max(KS)]]
            for k in KS:
                top = set(ranked[:k])
                hits[k].append(sum(e in top for e in evidence) / len(evidence))

    result = {
        "model_id": encoder.model_id,
        "min_weight": encoder.min_weight,
        "max_terms": encoder.max_terms,
        "questions": len(hits[KS[0]]),
        "questions_without_usable_evidence": no_evidence,
        "evidence_ids_dropped": dropped_ids,
        "recall": {f"R@{k}": round(100 * statistics.fmean(hits[k]), 1) for k in KS},
        "turns": n_turns,
        "load_s": round(load_s, 3),
        "turns_per_s": round(n_turns / encode_s, 1),
        "query_ms_median": round(statistics.median(query_ms), 2),
        "query_ms_p95": round(sorted(query_ms)[int(0.95 * len(query_ms))], 2),
        "terms_per_doc": round(statistics.fmean(doc_terms), 1),
        "terms_per_query": round(statistics.fmean(query_terms), 1),
    }
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:36} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
