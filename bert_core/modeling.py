"""The public import path of the model classes (BertModel and its heads): `from bert_core.modeling import ...`,
the one the docs show (docs/architecture.md section 1). The code lives in `bert_core.model.modeling`, which
the library's own modules import."""

from bert_core.model.modeling import (  # noqa: F401
    BertAttention,
    BertEmbeddings,
    BertEncoder,
    BertForMaskedLM,
    BertForNextSentencePrediction,
    BertForPreTraining,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertIntermediate,
    BertLayer,
    BertLMPredictionHead,
    BertModel,
    BertModelOutput,
    BertOnlyMLMHead,
    BertOnlyNSPHead,
    BertPooler,
    BertPredictionHeadTransform,
    BertPreTrainedModel,
    BertPreTrainingHeads,
    BertResidualOutput,
    BertSelfAttention,
    Dropout,
    LogitsOutput,
    PreTrainingOutput,
    QuestionAnsweringOutput,
    TiedGradient,
    count_parameters,
    dropout,
)

__all__ = ['BertModelOutput', 'PreTrainingOutput', 'LogitsOutput', 'QuestionAnsweringOutput', 'Dropout', 'dropout', 'BertEmbeddings', 'BertSelfAttention', 'BertResidualOutput', 'BertAttention', 'BertIntermediate', 'BertLayer', 'BertEncoder', 'BertPooler', 'BertPreTrainedModel', 'BertModel', 'BertPredictionHeadTransform', 'BertLMPredictionHead', 'BertOnlyMLMHead', 'BertOnlyNSPHead', 'BertPreTrainingHeads', 'BertForPreTraining', 'BertForMaskedLM', 'BertForNextSentencePrediction', 'BertForSequenceClassification', 'BertForTokenClassification', 'BertForQuestionAnswering', 'TiedGradient', 'count_parameters']
