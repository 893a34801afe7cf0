"""MLflow's "models from code" file for the task pyfunc (bert_core.deploy.mlflow_model.pyfunc_spec logs it).

MLflow copies this file into every logged model and runs it when the model is loaded. It only names the class,
which comes from the installed package: a model logged today is served by the code installed where it is
loaded, as it was when the class was pickled by reference. Not imported by the project itself.
"""

from mlflow.models import set_model

from bert_core.deploy.mlflow_pyfunc import BertTaskModel

set_model(BertTaskModel())
