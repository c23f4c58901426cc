package dockercluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/ory/dockertest/v3"
	dc "github.com/ory/dockertest/v3/docker"

	"github.com/quorumlock/redlock/internal/testenv"
)

// ComposeBinary is the Compose CLI Up runs (Debian: the docker-compose
// package; version 1.28 or later, for profiles).
const ComposeBinary = "docker-compose"

// TopologiesFile is the compose file of the replicated topologies, at the
// repository's root.
const TopologiesFile = "docker-compose.topologies.yml"

// composeTimeout bounds one docker-compose command (up, down).
const composeTimeout = 2 * time.Minute

// Compose is one profile of a compose file brought up as a project of its
// own (Up). Its containers are driven through the Docker API by service
// name: Kill, Pause, Unpause. Down runs in t.Cleanup.
type Compose struct {
	pool    *dockertest.Pool
	project string
	args    []string // -p project -f file --profile profile
	env     []string

	mu       sync.Mutex
	services map[string]string // service → container ID
	killed   map[string]bool
	paused   map[string]bool
}

// Up runs `docker-compose up -d` for profile of file (found in the current
// directory or one of its parents) with env added to the environment, as
// a project named uniquely for this call, and registers its removal
// (`docker-compose down`, after unpausing) in t.Cleanup before starting
// anything, so a failed start is cleaned up too. Without docker-compose,
// a Docker engine or the image it skips the test, or fails it with
// REDLOCK_REQUIRE_DOCKER=1.
func Up(t testing.TB, file, profile string, env map[string]string) *Compose {
	t.Helper()
	if _, err := exec.LookPath(ComposeBinary); err != nil {
		testenv.SkipOrFail(t, testenv.Docker, "dockercluster: %s not found on PATH (Debian: apt-get install docker-compose)", ComposeBinary)
	}
	pool := engine(t)
	path, err := findUp(file)
	if err != nil {
		t.Fatalf("dockercluster: %v", err)
	}
	c := &Compose{pool: pool, project: "redlock-" + profile + "-" + randomHex(4),
		services: map[string]string{}, killed: map[string]bool{}, paused: map[string]bool{}}
	c.args = []string{"-p", c.project, "-f", path, "--profile", profile}
	c.env = os.Environ()
	for k, v := range env {
		c.env = append(c.env, k+"="+v)
	}
	t.Cleanup(func() { c.down(t) })
	if out, err := c.run("up", "-d", "--no-color"); err != nil {
		t.Fatalf("dockercluster: %s up: %v\n%s", ComposeBinary, err, out)
	}
	if err := c.listServices(); err != nil {
		t.Fatalf("dockercluster: %v", err)
	}
	return c
}

// Project returns the compose project's name.
func (c *Compose) Project() string { return c.project }

// run runs one docker-compose command of the project.
func (c *Compose) run(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), composeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, ComposeBinary, append(append([]string{}, c.args...), args...)...)
	cmd.Env = c.env
	out, err := cmd.CombinedOutput()
	return string(out), errors.Join(err, ctx.Err())
}

// listServices maps each service of the project to its container.
func (c *Compose) listServices() error {
	list, err := c.pool.Client.ListContainers(dc.ListContainersOptions{All: true,
		Filters: map[string][]string{"label": {"com.docker.compose.project=" + c.project}}})
	if err != nil {
		return fmt.Errorf("listing the containers of %s: %w", c.project, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ct := range list {
		c.services[ct.Labels["com.docker.compose.service"]] = ct.ID
	}
	return nil
}

// container returns the ID of service's container.
func (c *Compose) container(t testing.TB, service string) string {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	id, ok := c.services[service]
	if !ok {
		t.Fatalf("dockercluster: project %s has no service %q", c.project, service)
	}
	return id
}

// Services returns the names of the project's services, sorted.
func (c *Compose) Services() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	names := make([]string, 0, len(c.services))
	for s := range c.services {
		names = append(names, s)
	}
	sort.Strings(names)
	return names
}

// Kill sends SIGKILL to service's container (docker kill) and waits until
// Docker reports it stopped. A paused container is unpaused first.
func (c *Compose) Kill(t testing.TB, service string) {
	t.Helper()
	id := c.container(t, service)
	if c.setPaused(service, false) {
		_ = c.pool.Client.UnpauseContainer(id)
	}
	err := c.pool.Client.KillContainer(dc.KillContainerOptions{ID: id, Signal: dc.SIGKILL})
	var notRunning *dc.ContainerNotRunning
	if err != nil && !errors.As(err, &notRunning) {
		t.Fatalf("dockercluster: kill %s: %v", service, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		ct, err := c.pool.Client.InspectContainer(id)
		if err != nil {
			t.Fatalf("dockercluster: inspect %s: %v", service, err)
		}
		if !ct.State.Running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dockercluster: %s still running 10s after SIGKILL", service)
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.mu.Lock()
	c.killed[service] = true
	c.mu.Unlock()
}

// Killed reports whether Kill stopped service.
func (c *Compose) Killed(service string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.killed[service]
}

// Pause freezes service's container (docker pause): connections are
// accepted by the kernel, commands hang.
func (c *Compose) Pause(t testing.TB, service string) {
	t.Helper()
	if err := pause(c.pool.Client, c.container(t, service)); err != nil {
		t.Fatalf("dockercluster: pause %s: %v", service, err)
	}
	c.setPaused(service, true)
}

// Unpause thaws service's container if Pause froze it; otherwise it does
// nothing, as SIGCONT to a running process does.
func (c *Compose) Unpause(t testing.TB, service string) {
	t.Helper()
	id := c.container(t, service)
	if !c.setPaused(service, false) {
		return
	}
	if err := c.pool.Client.UnpauseContainer(id); err != nil {
		t.Fatalf("dockercluster: unpause %s: %v", service, err)
	}
}

// setPaused records service's state and returns the previous one.
func (c *Compose) setPaused(service string, paused bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	was := c.paused[service]
	c.paused[service] = paused
	return was
}

// down unpauses what is paused (a paused container cannot be stopped) and
// removes the project: containers, and the default network if any.
func (c *Compose) down(t testing.TB) {
	c.mu.Lock()
	for s, p := range c.paused {
		if p {
			_ = c.pool.Client.UnpauseContainer(c.services[s])
		}
	}
	c.mu.Unlock()
	if out, err := c.run("down", "--timeout", "0", "--volumes", "--remove-orphans"); err != nil {
		t.Errorf("dockercluster: %s down (project %s): %v\n%s", ComposeBinary, c.project, err, out)
	}
}

// logs returns the tail of service's output, for failure messages.
func (c *Compose) logs(service string) string {
	out, err := c.run("logs", "--no-color", "--tail", "30", service)
	if err != nil {
		return fmt.Sprintf("(no logs of %s: %v)", service, err)
	}
	return out
}

// findUp looks for name in the current directory and its parents.
func findUp(name string) (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("%s not found in the current directory or its parents", name)
		}
		dir = parent
	}
}
