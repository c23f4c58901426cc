package redlock_test

import (
	"testing"
	"time"

	"github.com/quorumlock/redlock/internal/dockercluster"
)

// TestDockerNemesis runs the nemesis on five Redis containers
// (internal/dockercluster), with the fault proxies in front of the ports
// the containers publish on 127.0.0.1 (not the cluster's own latency
// forwarders). Every command then also crosses docker-proxy and the
// container's network namespace, so a second, real relay stands between
// a client that gave up and the server: the late commands the proxy
// delivers after the client left, followed by its half-close, must still
// run in the container. The random schedule is shorter than on processes
// (20 s; REDLOCK_NEMESIS_DURATION and REDLOCK_NEMESIS_SEED apply), with a
// longer node timeout for the extra hop. Skipped without Docker unless
// REDLOCK_REQUIRE_DOCKER=1.
func TestDockerNemesis(t *testing.T) {
	c := dockercluster.Start(t, 5)
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.DockerAddr()
	}
	t.Run("TargetedLateRelease", func(t *testing.T) {
		nemesisTargetedLateRelease(t, addrs[:3])
	})
	t.Run("Random", func(t *testing.T) {
		runNemesis(t, nemesisProxies(t, addrs), nemesisRun{
			seed:        nemesisSeed(t),
			duration:    nemesisDuration(t, 20*time.Second),
			ttl:         600 * time.Millisecond,
			nodeTimeout: 60 * time.Millisecond,
			lockers:     8,
			keys:        []string{"nemesis-docker-a", "nemesis-docker-b"},
		})
	})
}
