"""The sub-agent service the main slice calls, and the gRPC layer under it."""

from mgrpo_jax.serving.rpc import (
                                   ClientSettings,
                                   RpcClient,
                                   RpcError,
                                   RpcServer,
                                   RpcTimeoutError,
                                   ServerLimits,
                                   ServiceUnavailableError,
)

__all__ = ["ClientSettings", "RpcClient", "RpcError", "RpcServer", "RpcTimeoutError",
           "ServerLimits", "ServiceUnavailableError"]
