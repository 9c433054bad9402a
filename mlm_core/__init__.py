"""MLM Lab's library: masking, models, losses and training for masked-language models.

The flow, left to right: text → ``data.encode`` → ``masking.mask_tokens`` → ``head.masked_lm_logits``
→ ``losses`` → ``training.train``. Nothing here imports streamlit.

Only the flow's names are re-exported here (``from mlm_core import mask_tokens``). Each page's
view-model is imported from its own module (``from mlm_core.lessons.quiz import make_question``), so
importing the flow loads no lesson.
"""

from mlm_core.errors import InputError, MLMLabError, ModelLoadError
from mlm_core.masking import IGNORE_INDEX, Decision, MaskingConfig, MaskingResult, decision_names, mask_tokens
from mlm_core.data import (
    Encoded, MaskedSentence, encode, mask_batch, mask_positions, mask_sentence, read_text_upload, special_ids,
    split_sentences,
)
from mlm_core.bundled import load_default_tokenizer, workshop_documents, workshop_sentences

from mlm_core.models import available_models, load_masked_lm, model_description
from mlm_core.head import HeadFallbackWarning, gathered_head_family, masked_lm_hidden, masked_lm_logits
from mlm_core.predict import Predictions, TokenPrediction, fill_masks, predict_masked
from mlm_core.losses import (
    LossOutput, full_cross_entropy, loop_cross_entropy, token_counts, token_frequency_weights, weighted_cross_entropy,
)
from mlm_core.sampled_softmax import sampled_softmax_loss
from mlm_core.training import TrainConfig, TrainEvent, TrainResult, train, train_variants
