"""The SFT layer: supervised training of TinyLM and the checkpoints every lab starts from."""
