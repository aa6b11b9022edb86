"""Paper e's image experiments (Song & Ou 2021, sec. 3.2-3.3 and figure 1): supervised,
pre-training (an EBM u(x) = wᵀh(x), then fine-tuning) and joint training (u(x, y) = Ψ(x)[y]) of
one small convolutional network, on scikit-learn's digits or a user's images; `ssl-images` commands."""
