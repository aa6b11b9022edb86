"""Paper e's taggers (Song & Ou 2021): the BiLSTM-CRF of `models/crf.py` trained, evaluated and
applied by the `tag` commands.

- `vocab.py`: the word vocabulary a tagger reads (built from the training sentences, saved as
  `words.json` beside `tagger.json`);
- `metrics.py`: token accuracy and span F1 (BIO tags: chunking, NER);
- `folder.py`: a tagger's folder loaded whole (weights, spec, words) and sentences tagged;
- `train.py`: `tag train` (`TagTrainConfig`; `--method supervised | pretrain | joint`: the
  labelled and unlabelled sets, the models, the run folders);
- `recipes.py`: the three methods' recipes on the one loop (supervised CRF NLL; pre-training's
  TRF by DNCE, then stage 2; the JRF);
- `ssl.py`: the semi-supervised pieces: tagger + TRF + noise LM as one module, one DNCE step, the
  joint method's weight ramp;
- `commands.py`: `tag eval` and `tag predict`.
"""

from textebm.lazy import lazy_exports

# The command's config and run function, for Python (docs/api.md, "Training from Python"), loaded
# on first use: importing a library module of this package loads no command module.
__getattr__, __all__ = lazy_exports(__name__, {
    "TagTrainConfig": "train",
    "tag_train": "train",
})
