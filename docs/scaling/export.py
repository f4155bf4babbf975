#!/usr/bin/env python3
"""Writes the scaling study's measured points as CSV, one row per (folder, size, workers, entry,
seed), with the values each entry was tuned to: kept in the repository because run folders are
not. Usage: python3 docs/scaling/export.py runs/scaling runs/scaling-batch64 > docs/scaling/points.csv"""
import csv, glob, json, os, re, sys

PARAMS = {"37k": 37760, "125k": 124672, "373k": 372576, "842k": 842496}  # docs/scaling/study.sh
writer = csv.writer(sys.stdout, lineterminator="\n")
writer.writerow(["folder", "params", "workers", "entry", "seed", "final_val_loss", "final_val_loss_se",
                 "virtual_time_s", "bytes_sent_per_worker", "tuned_to"])
for folder in sys.argv[1:]:
    for point in sorted(glob.glob(os.path.join(folder, "*-tune"))):
        size = re.match(r"n(\w+?)-m\d+-tune$", os.path.basename(point)).group(1)
        tuning = json.load(open(os.path.join(point, "summary.json"))).get("tuning", {})
        chosen = {e["name"]: e["chosen"] for e in tuning.get("entries", [])}
        for seed_dir in sorted(glob.glob(os.path.join(point, "seed-*"))):
            seed = os.path.basename(seed_dir)[len("seed-"):]
            for r in json.load(open(os.path.join(seed_dir, "summary.json")))["results"]:
                writer.writerow([os.path.basename(folder.rstrip("/")), PARAMS[size], r["workers"], r["name"], seed,
                                 f"{r['final_val_loss']:.6f}", f"{r.get('final_val_loss_se') or 0:.6f}",
                                 f"{r['virtual_time_s']:.3f}", f"{r['bytes_sent_per_worker']:.0f}",
                                 json.dumps(chosen.get(r["name"], {}), sort_keys=True)])
