"""Paper e's taggers (Song & Ou 2021): the BiLSTM-CRF of `models/crf.py` trained, evaluated and
applied by the `tag` commands.

- `vocab.py`: the word vocabulary a tagger reads (built from the training sentences, saved as
  `words.json` beside `tagger.json`);
- `metrics.py`: token accuracy and span F1 (BIO tags: chunking, NER);
- `folder.py`: a tagger's folder loaded whole (weights, spec, words) and sentences tagged;
- `train.py`: `tag train` (`TagTrainConfig`; `--method supervised`: CRF NLL on the one loop);
- `commands.py`: `tag eval` and `tag predict`.
"""
