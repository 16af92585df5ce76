"""The build_base rule's parts: the base policy (tokenizer, tiny Llama or a pretrained model, SFT, held-out
verifier accuracy)."""
