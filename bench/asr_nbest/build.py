"""Build the offline ASR n-best benchmark: PTB sentences spoken by flite, decoded by pocketsphinx.

    bench/asr_nbest/.venv/bin/python bench/asr_nbest/build.py --out bench/asr_nbest/data \
        --n-dev 300 --n-test 300

(see README.md and the Makefile beside this file for the environment). Steps:

1. PTB (the project's `textebm data prepare ptb`, run once into WORK/ptb unless --ptb is given).
   Candidates: dev (PTB valid) and test sentences without <unk> / N, of --min-words..--max-words
   tokens, not also a PTB train sentence, all of whose words (clitics joined: "do n't" ->
   "don't") are in pocketsphinx's default dictionary. A seeded shuffle of each split's
   candidates; the first --n-dev / --n-test are used (so a larger N extends a smaller build).
2. Each utterance gets a voice (round robin over --voices), a speed (uniform in --speed-min..max)
   and a white-noise level (SNR uniform in --snr-min..max dB), all fixed by --seed and its id.
   flite speaks it (16 kHz) -> WORK/wav/ID.wav; pocketsphinx 5 decodes it with a fresh decoder
   (no state carried between utterances), --paths A* paths are pulled from the lattice, their
   texts normalised to PTB tokens, duplicates merged (best score kept) and re-sorted ->
   WORK/nbest/ID.json. Both are cached with the settings that made them: a rerun redoes only what
   is missing or stale, so a killed build continues where it stopped.
3. OUT/dev.json, OUT/test.json (awslabs/mlm-scoring n-best JSON, top --nbest per utterance),
   OUT/meta.jsonl (voice, speed, SNR, ... per utterance), OUT/hyps.jsonl (each unique hypothesis
   text once, with an id: the input for `textebm score` and ngram_scores.py) and OUT/stats.json
   (1-best and oracle WER, timings, CPU).

Scores: pocketsphinx's A* path score is an integer log score in base 1.0001 (its logmath base)
with both the acoustic and the (weighted) LM parts shifted right by 10 bits (SENSCR_SHIFT), i.e. in
units of 1024 * ln(1.0001) nats; the Python API hands it out as 1.0001**score. We store
score = 1024 * ln(that float) = the recogniser's total (acoustic + lw * LM + insertion penalty)
log score in nats, higher is better.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import wave
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import corpus_wer, edit_distance, join_clitics, split_clitics  # noqa: E402
from hyps import write_hyps  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SENSCR_SHIFT = 10
CACHE_VERSION = 1


# ----------------------------------------------------------------------------- small helpers

def atomic_write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600
    os.replace(tmp, path)


def atomic_write_json(path: Path, obj) -> None:
    atomic_write_bytes(path, (json.dumps(obj, ensure_ascii=False, indent=1) + "\n").encode())


def read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def dump_nbest(obj: dict) -> str:
    """One JSON object, one utterance a line (small, and diffs stay readable)."""
    items = [f"{json.dumps(k)}: {json.dumps(v, ensure_ascii=False)}" for k, v in obj.items()]
    return "{\n" + ",\n".join(items) + "\n}\n"


def read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


# ----------------------------------------------------------------------------- data selection

def ensure_ptb(ptb: Path | None, work: Path) -> Path:
    if ptb is not None:
        return ptb
    ptb = work / "ptb"
    if (ptb / "dev.jsonl").is_file():
        return ptb
    exe = shutil.which("textebm") or str(REPO / ".venv" / "bin" / "textebm")
    if not Path(exe).exists():
        sys.exit("need PTB: pass --ptb DIR (from `textebm data prepare ptb --out DIR`) or "
                 "install the project (make venv) so that textebm is found")
    print(f"preparing PTB with {exe} -> {ptb}", flush=True)
    subprocess.run([exe, "data", "prepare", "ptb", "--out", str(ptb)], check=True)
    return ptb


def recogniser_vocabulary() -> set[str]:
    """Words pocketsphinx can output: in its default dictionary and in its default LM (the
    dictionary has e.g. "mr." and "u.s.", which the LM lacks, so they are never recognised)."""
    from pocketsphinx import Decoder

    dec = Decoder(loglevel="ERROR")
    lm = dec.get_lm()
    oov = lm.prob(["<no-such-word>"])  # the LM's log-zero for a word it lacks
    words = set()
    with open(dec.config["dict"], encoding="utf-8") as f:
        for line in f:
            if line.strip():
                words.add(re.sub(r"\(\d+\)$", "", line.split()[0]))
    return {w for w in words if lm.prob([w]) != oov}


def candidates(ptb: Path, split: str, vocab: set[str], train: set[str], lo: int, hi: int,
               counts: dict) -> list[dict]:
    out, seen = [], set()
    for row in read_jsonl(ptb / f"{split}.jsonl"):
        text = " ".join(row["text"].split())
        toks = text.split()
        counts["sentences"] = counts.get("sentences", 0) + 1
        if "<unk>" in toks or "N" in toks:
            continue
        counts["no <unk>/N"] = counts.get("no <unk>/N", 0) + 1
        if not lo <= len(toks) <= hi:
            continue
        counts[f"{lo}-{hi} tokens"] = counts.get(f"{lo}-{hi} tokens", 0) + 1
        spoken = join_clitics(toks)
        if not all(w in vocab for w in spoken) or split_clitics(spoken) != toks:
            continue
        counts["in recogniser vocabulary"] = counts.get("in recogniser vocabulary", 0) + 1
        if text in train or text in seen:
            continue
        seen.add(text)
        counts["unique, not in train"] = counts.get("unique, not in train", 0) + 1
        out.append({"ptb_id": row["id"], "ref": text, "spoken": " ".join(spoken)})
    return out


# ----------------------------------------------------------------------------- synthesis

def synthesise(spec: dict, wav_path: Path) -> float:
    """flite -> int16 16 kHz, plus white noise at spec['snr_db']; returns the duration (s)."""
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "flite.wav"
        subprocess.run(["flite", "-voice", spec["voice"],
                        "--setf", f"duration_stretch={1.0 / spec['speed']:.6f}",
                        "-t", spec["spoken"], "-o", str(raw)], check=True, capture_output=True)
        with wave.open(str(raw)) as w:
            rate, width, ch = w.getframerate(), w.getsampwidth(), w.getnchannels()
            x = np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16).astype(np.float64)
    if (rate, width, ch) != (16000, 2, 1):
        raise RuntimeError(f"flite voice {spec['voice']} gives {rate} Hz/{width * 8} bit/{ch} ch, "
                           "need 16 kHz 16 bit mono (use kal16, not kal)")
    power = float(np.mean(x ** 2))
    rng = np.random.default_rng(spec["noise_seed"])
    y = x + rng.normal(0.0, math.sqrt(power / 10 ** (spec["snr_db"] / 10)), size=x.shape)
    y = np.clip(np.round(y), -32768, 32767).astype(np.int16)
    fd, tmp = tempfile.mkstemp(dir=wav_path.parent, prefix=f".{wav_path.name}.", suffix=".tmp")
    os.close(fd)
    with wave.open(tmp, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(y.tobytes())
    os.replace(tmp, wav_path)
    return len(y) / 16000


# ----------------------------------------------------------------------------- decoding

def normalise(hypstr: str) -> str:
    words = []
    for w in hypstr.lower().split():
        w = re.sub(r"\(\d+\)$", "", w)  # alternative pronunciation marks, if any
        if w.startswith(("<", "[", "+")):  # <s> </s> <sil> [noise] +fillers+
            continue
        words.append(w)
    return " ".join(split_clitics(words))


def decode(wav_path: Path, paths: int, keep: int) -> dict:
    from pocketsphinx import Decoder

    with wave.open(str(wav_path)) as w:
        data = w.readframes(w.getnframes())
    t0 = time.perf_counter()
    dec = Decoder(loglevel="ERROR")  # fresh per utterance: no CMN or other state carried over
    dec.start_utt()
    dec.process_raw(data, full_utt=True)
    dec.end_utt()
    best = dec.hyp()
    merged: dict[str, float] = {}
    n = 0
    for h in dec.nbest():
        if n >= paths or h is None:
            break
        n += 1
        if h.score <= 0.0:  # 1.0001**score underflowed; never seen (needs < -7.6e9 nats)
            continue
        nats = (1 << SENSCR_SHIFT) * math.log(h.score)
        text = normalise(h.hypstr)
        if text not in merged or nats > merged[text]:
            merged[text] = nats
    hyps = sorted(merged.items(), key=lambda kv: -kv[1])[:keep]
    return {"bestpath": normalise(best.hypstr) if best is not None else "",
            "n_paths": n, "n_unique": len(merged),
            "hyps": [[t, round(s, 4)] for t, s in hyps],
            "decode_s": round(time.perf_counter() - t0, 3)}


def process(job: tuple[dict, str, int, int]) -> dict:
    """Synthesise (if not cached) and decode (if not cached) one utterance; returns its record."""
    spec, work, paths, keep = job
    work = Path(work)
    uid = spec["id"]
    wav_path, wav_meta = work / "wav" / f"{uid}.wav", work / "wav" / f"{uid}.json"
    nb_path = work / "nbest" / f"{uid}.json"
    wav_key = {k: spec[k] for k in ("spoken", "voice", "speed", "snr_db", "noise_seed")}
    synth_s = None
    meta = read_json(wav_meta)
    if not (wav_path.is_file() and meta and meta.get("key") == wav_key):
        wav_path.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        dur = synthesise(spec, wav_path)
        synth_s = round(time.perf_counter() - t0, 3)
        meta = {"key": wav_key, "duration_s": round(dur, 3), "synth_s": synth_s}
        atomic_write_json(wav_meta, meta)
    dec_key = {"wav": wav_key, "paths": paths, "keep": keep, "version": CACHE_VERSION}
    cached = read_json(nb_path)
    decoded = False
    if not (cached and cached.get("key") == dec_key):
        cached = {"key": dec_key, **decode(wav_path, paths, keep)}
        atomic_write_json(nb_path, cached)
        decoded = True
    return {"id": uid, "duration_s": meta["duration_s"], "synth_s": meta["synth_s"],
            "did_synth": synth_s is not None, "did_decode": decoded, **cached}


# ----------------------------------------------------------------------------- main

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--out", default=str(HERE / "data"), help="where dev.json, test.json, ... go")
    ap.add_argument("--work", default=str(HERE / "work"), help="cache: wav/, nbest/, ptb/")
    ap.add_argument("--ptb", default=None, help="prepared PTB (default: WORK/ptb, made if missing)")
    ap.add_argument("--n-dev", type=int, default=300)
    ap.add_argument("--n-test", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--min-words", type=int, default=5)
    ap.add_argument("--max-words", type=int, default=25)
    ap.add_argument("--voices", default="kal16,awb,rms,slt")
    ap.add_argument("--speed-min", type=float, default=0.9)
    ap.add_argument("--speed-max", type=float, default=1.15)
    ap.add_argument("--snr-min", type=float, default=25.0)
    ap.add_argument("--snr-max", type=float, default=40.0)
    ap.add_argument("--paths", type=int, default=3000, help="A* paths pulled per utterance")
    ap.add_argument("--nbest", type=int, default=50, help="unique hypotheses kept per utterance")
    ap.add_argument("--jobs", type=int, default=1, help="parallel utterances (processes)")
    args = ap.parse_args()

    if shutil.which("flite") is None:
        sys.exit("flite not found: apt-get install -y flite")
    import pocketsphinx  # fail early when run outside the bench venv

    out, work = Path(args.out), Path(args.work)
    ptb = ensure_ptb(Path(args.ptb) if args.ptb else None, work)
    vocab = recogniser_vocabulary()
    train = {" ".join(r["text"].split()) for r in read_jsonl(ptb / "train.jsonl")}
    voices = args.voices.split(",")

    specs, selection = [], {}
    for split, n in (("dev", args.n_dev), ("test", args.n_test)):
        counts: dict = {}
        cands = candidates(ptb, split, vocab, train, args.min_words, args.max_words, counts)
        random.Random(f"{args.seed}-{split}").shuffle(cands)
        if n > len(cands):
            sys.exit(f"{split}: only {len(cands)} candidate sentences, asked for {n}")
        selection[split] = {"filter": counts, "used": n}
        print(f"{split}: " + ", ".join(f"{k} {v}" for k, v in counts.items()) + f"; using {n}",
              flush=True)
        for i, c in enumerate(cands[:n]):
            rng = random.Random(f"{args.seed}-{c['ptb_id']}")
            specs.append({"id": c["ptb_id"], "split": split, "ref": c["ref"], "spoken": c["spoken"],
                          "voice": voices[i % len(voices)],
                          "speed": round(rng.uniform(args.speed_min, args.speed_max), 3),
                          "snr_db": round(rng.uniform(args.snr_min, args.snr_max), 1),
                          "noise_seed": rng.randrange(2 ** 32)})

    jobs = [(s, str(work), args.paths, args.nbest) for s in specs]
    results: dict[str, dict] = {}
    t_start = time.perf_counter()
    n_done_new = 0
    errs = words = 0

    def report(rec: dict, k: int) -> None:
        nonlocal n_done_new, errs, words
        results[rec["id"]] = rec
        spec = by_id[rec["id"]]
        top = rec["hyps"][0][0] if rec["hyps"] else ""
        errs += edit_distance(spec["ref"].split(), top.split())
        words += len(spec["ref"].split())
        if rec["did_synth"] or rec["did_decode"]:
            n_done_new += 1
        if rec["did_decode"] or k == len(jobs) or k % 50 == 0:
            el = time.perf_counter() - t_start
            todo = len(jobs) - k
            eta = el / n_done_new * todo if n_done_new else 0.0
            print(f"[{k}/{len(jobs)}] {rec['id']} {spec['voice']:5s} x{spec['speed']:.2f} "
                  f"{spec['snr_db']:4.1f} dB  {rec['duration_s']:4.1f} s audio, decode "
                  f"{rec['decode_s']:.2f} s, {rec['n_unique']:3d} unique of {rec['n_paths']} paths"
                  f"  | 1-best WER so far {100 * errs / max(words, 1):.1f}%  elapsed {el:.0f} s"
                  f"  eta {eta:.0f} s", flush=True)

    by_id = {s["id"]: s for s in specs}
    if args.jobs > 1:
        import multiprocessing as mp

        with mp.Pool(args.jobs) as pool:
            for k, rec in enumerate(pool.imap_unordered(process, jobs), 1):
                report(rec, k)
    else:
        for k, job in enumerate(jobs, 1):
            report(process(job), k)
    wall = time.perf_counter() - t_start

    # ------------------------------------------------------------------ outputs
    out.mkdir(parents=True, exist_ok=True)
    stats: dict = {"settings": {k: v for k, v in vars(args).items() if k not in ("out", "work", "ptb", "jobs")},
                   "pocketsphinx": pocketsphinx.__version__ if hasattr(pocketsphinx, "__version__") else "",
                   "flite": subprocess.run(["flite", "--version"], capture_output=True, text=True).stdout.strip(),
                   "cpu": cpu_name(), "cpu_count": os.cpu_count(), "selection": selection,
                   "score_unit": "nats: 1024 * ln(pocketsphinx Hypothesis.score); see build.py"}
    try:
        from importlib.metadata import version

        stats["pocketsphinx"] = version("pocketsphinx")
    except Exception:
        pass
    meta_lines = []
    for split in ("dev", "test"):
        nbest_json, pairs_1, pairs_bp, pairs_or, ref_words, in_list = {}, [], [], [], 0, 0
        per_voice: dict[str, list[tuple[str, str]]] = {}
        n_hyps, secs = [], {"audio_s": 0.0, "synth_s": 0.0, "decode_s": 0.0}
        for spec in (s for s in specs if s["split"] == split):
            rec = results[spec["id"]]
            rec["hyps"] = [h for h in rec["hyps"] if h[0]]  # an all-filler path: no text to score
            if not rec["hyps"]:
                print(f"warning: {spec['id']}: no hypothesis, left out", flush=True)
                continue
            entry = {"ref": spec["ref"]}
            for i, (text, score) in enumerate(rec["hyps"], 1):
                entry[f"hyp_{i}"] = {"text": text, "score": score}
            nbest_json[spec["id"]] = entry
            ref = spec["ref"].split()
            pairs_1.append((spec["ref"], rec["hyps"][0][0]))
            pairs_bp.append((spec["ref"], rec["bestpath"]))
            per_voice.setdefault(spec["voice"], []).append((spec["ref"], rec["hyps"][0][0]))
            pairs_or.append((spec["ref"], min((t for t, _ in rec["hyps"]),
                                              key=lambda t: edit_distance(ref, t.split()))))
            ref_words += len(ref)
            in_list += any(t == spec["ref"] for t, _ in rec["hyps"])
            n_hyps.append(len(rec["hyps"]))
            secs["audio_s"] += rec["duration_s"]
            secs["synth_s"] += rec["synth_s"]
            secs["decode_s"] += rec["decode_s"]
            meta_lines.append({"id": spec["id"], "split": split, "voice": spec["voice"],
                               "speed": spec["speed"], "snr_db": spec["snr_db"],
                               "noise": "white gaussian", "noise_seed": spec["noise_seed"],
                               "duration_s": rec["duration_s"], "n_hyps": len(rec["hyps"]),
                               "n_paths": rec["n_paths"], "n_unique": rec["n_unique"],
                               "bestpath": rec["bestpath"], "spoken": spec["spoken"],
                               "wav": f"wav/{spec['id']}.wav"})
        atomic_write_bytes(out / f"{split}.json", dump_nbest(nbest_json).encode())
        s = {"utterances": len(nbest_json), "ref_words": ref_words,
             "wer_1best": corpus_wer(pairs_1), "wer_oracle": corpus_wer(pairs_or),
             "wer_bestpath": corpus_wer(pairs_bp),
             "ref_in_nbest": in_list / max(len(nbest_json), 1),
             "wer_1best_by_voice": {v: corpus_wer(p) for v, p in sorted(per_voice.items())},
             "hyps_per_utt": {"mean": float(np.mean(n_hyps)) if n_hyps else 0.0,
                              "min": min(n_hyps, default=0), "max": max(n_hyps, default=0)},
             **{k: round(v, 1) for k, v in secs.items()}}
        try:
            import jiwer

            s["jiwer_cross_check"] = {"wer_1best": jiwer.wer(*map(list, zip(*pairs_1))),
                                      "wer_oracle": jiwer.wer(*map(list, zip(*pairs_or)))}
        except ImportError:
            pass
        stats[split] = s
        print(f"{split}: {s['utterances']} utterances, {ref_words} words, 1-best WER "
              f"{100 * s['wer_1best']:.1f}%, oracle WER {100 * s['wer_oracle']:.1f}% "
              f"(bestpath {100 * s['wer_bestpath']:.1f}%), ref in n-best {100 * s['ref_in_nbest']:.0f}%, "
              f"{s['hyps_per_utt']['mean']:.1f} hyps/utt; by voice: "
              + ", ".join(f"{v} {100 * w:.1f}%" for v, w in s["wer_1best_by_voice"].items()), flush=True)
    atomic_write_bytes(out / "meta.jsonl",
                       "".join(json.dumps(m, ensure_ascii=False) + "\n" for m in meta_lines).encode())
    stats["unique_hypothesis_texts"] = write_hyps(out)
    stats["synth_plus_decode_s_total"] = round(sum(stats[s][k] for s in ("dev", "test")
                                                   for k in ("synth_s", "decode_s")), 1)
    stats["last_run_wall_s"] = round(wall, 1)
    stats["last_run_new_utterances"] = n_done_new
    atomic_write_json(out / "stats.json", stats)
    print(f"wrote {out}: dev.json, test.json, meta.jsonl, hyps.jsonl ({stats['unique_hypothesis_texts']} texts), "
          f"stats.json; this run {wall:.0f} s for {n_done_new} new utterances", flush=True)


if __name__ == "__main__":
    main()
