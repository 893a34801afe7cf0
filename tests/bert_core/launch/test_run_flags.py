"""Errors about a step's inputs and outputs name the flag as well as the URI (walked: `finetune --data-dir
s3://b/NOPE` said only "s3://b/NOPE: no objects under this prefix", `pretrain --output s3://missing/x` only
"s3://missing/x: the S3 bucket 'missing' does not exist on ...", while pretrain's --data errors said "--data: ...").
Real S3 protocol on loopback (moto), the real steps' plans, as `bert-pipeline` runs them."""

import pytest

from bert_core.errors import BertPipelineError
from bert_core.finetune.step import FINETUNE, FinetuneConfig
from bert_core.launch.run import naming_flag, run_step
from bert_core.pretrain.step import PRETRAIN


def _finetune(**kw) -> FinetuneConfig:
    return FinetuneConfig(task="SST-2", **{"data_dir": "s3://bert/glue/SST-2", "model": "s3://bert/model",
                                           "output": "s3://bert/out", "tracking": False, **kw})


def test_finetune_errors_about_s3_inputs_name_their_flags(s3_bert_bucket):
    s3 = s3_bert_bucket
    with pytest.raises(BertPipelineError) as err:
        run_step(FINETUNE, _finetune())
    assert str(err.value) == "--data-dir: s3://bert/glue/SST-2: no objects under this prefix"
    s3.s3_client().put_object(Bucket="bert", Key="glue/SST-2/train.tsv", Body=b"sentence\tlabel\nfine\t1\n")
    with pytest.raises(BertPipelineError) as err:
        run_step(FINETUNE, _finetune(data_dir="s3://nobucket/glue/SST-2"))
    assert str(err.value).startswith("--data-dir: s3://nobucket/glue/SST-2: the S3 bucket 'nobucket' does not exist")
    with pytest.raises(BertPipelineError) as err:
        run_step(FINETUNE, _finetune())
    assert str(err.value).startswith("--model: s3://bert/model: "), err.value


def test_the_longest_matching_value_names_the_flag():
    from bert_core.pretrain.config import PretrainConfig

    config = PretrainConfig(data="s3://b/shards", model="bert_2_128_2", output="s3://b/run", num_steps=1,
                            storage="s3://b/run/ray_results")
    said = naming_flag(PRETRAIN, config, BertPipelineError("s3://b/run/ray_results/pretrain-1: access denied"))
    assert str(said) == "--storage: s3://b/run/ray_results/pretrain-1: access denied"
    said = naming_flag(PRETRAIN, config, BertPipelineError("s3://b/run: the S3 bucket 'b' does not exist on X"))
    assert str(said) == "--output: s3://b/run: the S3 bucket 'b' does not exist on X"
    untouched = BertPipelineError("--data: s3://b/shards: no objects under this prefix")
    assert naming_flag(PRETRAIN, config, untouched) is untouched
    assert str(naming_flag(PRETRAIN, config, BertPipelineError("s3://b/runs: x"))) == "s3://b/runs: x"
