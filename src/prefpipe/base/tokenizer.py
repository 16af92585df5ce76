"""A byte-level BPE tokenizer trained on the synthetic corpus, wrapped for transformers with a chat template.

Pre-tokenisation isolates whitespace runs, letter runs, single digits and punctuation runs, so a word is the
same token wherever it appears ("cat" in the prompt and at the start of the answer) and numbers are spelled
digit by digit; both make copying and arithmetic easier for a tiny model. Byte-level encoding keeps every
string representable and decoding exact. `whole_words` (a world's names, data/whole_words.json) become added
tokens that match only as whole words: BPE with a few hundred merges spends them on the corpus's most frequent
words, so a name a policy must copy could otherwise be split differently in different corpora. BOS comes from the chat template (not a post-processor), so
tokenising a bare response never inserts a BOS in the middle of a sequence; PAD is distinct from EOS so
padding is never mistaken for the end of a response.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

PAD, BOS, EOS = "<|pad|>", "<|bos|>", "<|eos|>"
ROLE_TOKENS = ("<|user|>", "<|assistant|>", "<|system|>")
SPECIAL_TOKENS = (PAD, BOS, EOS, *ROLE_TOKENS)
SPLIT_PATTERN = r"\p{L}+\s*|\p{N}\s*|[^\s\p{L}\p{N}]+\s*|\s+"
# <|bos|><|user|>question<|assistant|>answer<|eos|>; a generation prompt ends right after <|assistant|>.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}{{ '<|assistant|>' + message['content'] + eos_token }}"
    "{% else %}{{ '<|' + message['role'] + '|>' + message['content'] }}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)


def train_tokenizer(
    texts: Iterable[str], vocab_size: int, model_max_length: int, whole_words: Sequence[str] = ()
) -> PreTrainedTokenizerFast:
    """Train BPE on `texts` (vocab_size includes the 256 bytes and the special tokens), then add `whole_words`
    as one token each (beyond vocab_size; a word is matched only where it stands alone: "Ada" in "Ada," not in
    "Adam"; a tag such as "</search>" wherever it occurs)."""
    minimum = len(pre_tokenizers.ByteLevel.alphabet()) + len(SPECIAL_TOKENS)
    if vocab_size < minimum:
        raise ValueError(
            f"base.tokenizer.vocab_size={vocab_size} must be at least {minimum} (bytes + specials)"
        )
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    tok.add_tokens([AddedToken(w, single_word=w.isalnum(), normalized=False) for w in whole_words])
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        extra_special_tokens=list(ROLE_TOKENS),
        clean_up_tokenization_spaces=False,
        model_max_length=model_max_length,
        padding_side="right",
    )
    wrapped.chat_template = CHAT_TEMPLATE
    return wrapped
