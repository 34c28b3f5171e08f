"""What SageMaker calls: /invocations, /execution-parameters, adapters, sessions, custom code."""
