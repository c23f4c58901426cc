package testenv_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/quorumlock/redlock/internal/testenv"
)

const childEnv = "TESTENV_CHILD"

// TestSkipOrFail runs TestChild in a child process (Skip and Fatal end the
// test that calls them, so they cannot be observed from inside it) with
// and without the requiring variable, and checks the outcome and message.
func TestSkipOrFail(t *testing.T) {
	for _, tc := range []struct {
		required bool
		wantOK   bool
		want     string
	}{
		{false, true, "--- SKIP: TestChild"},
		{true, false, "--- FAIL: TestChild"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestChild$", "-test.v")
		cmd.Env = append(os.Environ(), childEnv+"=1", testenv.Redis+"=")
		if tc.required {
			cmd.Env = append(cmd.Env, testenv.Redis+"=1")
		}
		out, err := cmd.CombinedOutput()
		if (err == nil) != tc.wantOK || !strings.Contains(string(out), tc.want) {
			t.Errorf("required=%v: err = %v, output:\n%s\nwant %q", tc.required, err, out, tc.want)
		}
		msg := "set " + testenv.Redis + "=1 to fail instead of skipping"
		if tc.required {
			msg = testenv.Redis + "=1, so this is fatal"
		}
		if !strings.Contains(string(out), "widget not found ("+msg+")") {
			t.Errorf("required=%v: output lacks the message %q:\n%s", tc.required, msg, out)
		}
	}
}

// TestChild is the test TestSkipOrFail runs in a child process.
func TestChild(t *testing.T) {
	if os.Getenv(childEnv) != "1" {
		t.Skip("run by TestSkipOrFail")
	}
	testenv.SkipOrFail(t, testenv.Redis, "widget %s", "not found")
	t.Error("SkipOrFail returned")
}
