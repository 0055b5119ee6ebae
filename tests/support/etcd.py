# etcd for tests: the development cluster's members (lockgate.tools.devcluster), started,
# killed (SIGKILL), paused (SIGSTOP) and restarted by PID on 127.0.0.1 ports of their own.
from lockgate.tools.devcluster import EtcdCluster, EtcdMember, etcd_available

__all__ = ["EtcdCluster", "EtcdMember", "etcd_available"]
