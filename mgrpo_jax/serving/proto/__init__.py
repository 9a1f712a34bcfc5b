"""The service's protobuf schema (`sub_agent.proto`) and its generated module."""
