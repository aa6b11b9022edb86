"""Paper e's taggers (Song & Ou 2021): the BiLSTM-CRF of `models/crf.py` trained, evaluated and
applied by the `tag` commands.

- `vocab.py`: the word vocabulary a tagger reads (built from the training sentences, saved as
  `words.json` beside `tagger.json`);
- `metrics.py`: token accuracy and span F1 (BIO tags: chunking, NER);
- `folder.py`: a tagger's folder loaded whole (weights, spec, words) and sentences tagged;
- `train.py`: `tag train` (`TagTrainConfig`; `--method supervised`: CRF NLL on the one loop);
- `ssl.py`: the semi-supervised pieces: tagger + TRF + noise LM as one module, one DNCE step, the
  joint method's weight ramp;
- `ssl_train.py`: `--method pretrain` (a TRF language model on unlabelled sentences, then the
  BiLSTM frozen) and `--method joint` (the JRF);
- `commands.py`: `tag eval` and `tag predict`.
"""
