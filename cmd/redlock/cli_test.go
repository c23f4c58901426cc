package main

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// result is what one run of the built command did.
type result struct {
	status         int
	stdout, stderr string
}

// redlockCmd runs the built command bin with args and the environment
// env added to the test's own, without LOCK_DISTRIBUTED_NODES unless env
// sets it.
func redlockCmd(t *testing.T, bin string, env []string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LOCK_DISTRIBUTED_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "%v", args)
	}
	return result{cmd.ProcessState.ExitCode(), out.String(), errb.String()}
}

// redlock alone prints every command with its summary, and the exit
// statuses, on stderr with the usage status; redlock help (or -h, --help)
// prints the same on stdout and exits 0.
func TestHelpListsEveryCommand(t *testing.T) {
	bin := buildRedlock(t)
	bare := redlockCmd(t, bin, nil)
	assert.Equal(t, exitUsage, bare.status)
	assert.Empty(t, bare.stdout)
	for _, c := range commands {
		assert.Regexp(t, `(?m)^  `+c.name+` +`+regexp.QuoteMeta(c.summary)+`$`, bare.stderr)
	}
	assert.Regexp(t, `(?m)^  help +`+regexp.QuoteMeta(helpSummary)+`$`, bare.stderr)
	assert.Contains(t, bare.stderr, exitStatusHelp)

	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}, {"help", "help"}} {
		r := redlockCmd(t, bin, nil, args...)
		assert.Equal(t, exitOK, r.status, "%v", args)
		assert.Equal(t, bare.stderr, r.stdout, "%v prints what redlock alone prints", args)
		assert.Empty(t, r.stderr, "%v", args)
	}
}

// redlock help CMD prints CMD's help, its flags and the exit statuses on
// stdout and exits 0, as CMD -h, --help and help do.
func TestHelpOfEveryCommand(t *testing.T) {
	bin := buildRedlock(t)
	pid := regexp.MustCompile(`:\d+"\)`) // elect's --value default: host:pid
	for _, c := range commands {
		help := redlockCmd(t, bin, nil, "help", c.name)
		assert.Equal(t, exitOK, help.status, c.name)
		assert.Empty(t, help.stderr, c.name)
		assert.True(t, strings.HasPrefix(help.stdout, "usage: redlock "+c.name), "%s: %s", c.name, help.stdout)
		assert.Contains(t, help.stdout, "\nflags:\n  --addrs string\n", c.name)
		assert.True(t, strings.HasSuffix(help.stdout, "\n"+exitStatusHelp), "%s ends with the exit statuses", c.name)
		for _, h := range []string{"-h", "--help", "-help", "help"} {
			r := redlockCmd(t, bin, nil, c.name, h)
			r.stdout, help.stdout = pid.ReplaceAllString(r.stdout, `:PID")`), pid.ReplaceAllString(help.stdout, `:PID")`)
			assert.Equal(t, help, r, "redlock %s %s is redlock help %s", c.name, h, c.name)
		}
	}
}

// An unknown command is named, with a pointer to redlock help.
func TestUnknownCommand(t *testing.T) {
	bin := buildRedlock(t)
	for _, args := range [][]string{{"nope"}, {"help", "nope"}, {"--nope"}} {
		r := redlockCmd(t, bin, nil, args...)
		assert.Equal(t, exitUsage, r.status, "%v", args)
		assert.Empty(t, r.stdout, "%v", args)
		name := args[len(args)-1]
		assert.Equal(t, fmt.Sprintf("redlock: unknown command %q\n(redlock help lists the commands)\n", name), r.stderr)
	}
	r := redlockCmd(t, bin, nil, "help", "run", "elect")
	assert.Equal(t, exitUsage, r.status)
	assert.Contains(t, r.stderr, "(redlock help lists the commands)")
}

// Every duration, integer and boolean flag of every command refuses a bad
// value in one line that names the flag and the value and says what it
// wants, then a line pointing to the command's help: no usage dump. The
// flags are found in the commands' help.
func TestFlagErrorsNameTheFlag(t *testing.T) {
	bin := buildRedlock(t)
	r := redlockCmd(t, bin, nil, "run", "--ttl", "10", "--key", "k", "--", "true")
	assert.Equal(t, exitUsage, r.status)
	assert.Equal(t, "redlock run: --ttl \"10\": want a duration such as 10s or 1m30s\n(redlock help run for usage)\n", r.stderr)

	flagLine := regexp.MustCompile(`(?m)^  --(\S+)(?: (duration|int))?$`)
	seen := map[string]int{}
	for _, c := range commands {
		help := redlockCmd(t, bin, nil, "help", c.name).stdout
		for _, m := range flagLine.FindAllStringSubmatch(help, -1) {
			name, kind := m[1], m[2]
			hint := "\n(redlock help " + c.name + " for usage)\n"
			var tries []struct{ value, want string }
			switch {
			case kind == "duration":
				tries = append(tries,
					struct{ value, want string }{"10", `want a duration such as 10s or 1m30s`},
					struct{ value, want string }{"-1s", `want a duration (above 0|of 0 or more), such as 10s or 1m30s`})
			case kind == "int":
				tries = append(tries,
					struct{ value, want string }{"x", `want a whole number of \d+ or more, such as \d+`},
					struct{ value, want string }{"-1", `want a whole number of \d+ or more, such as \d+`})
			default: // a boolean flag
				tries = append(tries, struct{ value, want string }{"maybe", `want true or false`})
			}
			seen[kind]++
			for _, try := range tries {
				arg := "--" + name + "=" + try.value
				r := redlockCmd(t, bin, nil, c.name, arg)
				assert.Equal(t, exitUsage, r.status, "%s %s", c.name, arg)
				assert.Empty(t, r.stdout, "%s %s", c.name, arg)
				assert.Regexp(t, `^redlock `+c.name+`: --`+regexp.QuoteMeta(name)+` `+regexp.QuoteMeta(strconv.Quote(try.value))+`: `+try.want+regexp.QuoteMeta(hint)+`$`,
					r.stderr, "%s %s", c.name, arg)
			}
		}
	}
	// run, elect, bench, inspect and release: 9 duration flags; run,
	// bench and inspect: 3 int flags; run, bench, inspect and release: 5
	// boolean flags.
	assert.Equal(t, map[string]int{"duration": 9, "int": 3, "": 5}, seen)

	for _, tt := range []struct{ args, stderr string }{
		{"run --bogus", `redlock run: unknown flag --bogus`},
		{"inspect --timeout", `redlock inspect: --timeout needs a value: want a duration above 0, such as 10s or 1m30s`},
		{"release --key", `redlock release: --key needs a value`},
		{"bench --nodes 1,x", `redlock bench: --nodes "1,x": want counts of 1 or more, such as 1,3,5`},
		{"demo --addrs redis://h:1", `redlock demo: --addrs "redis://h:1": want host:port, such as 127.0.0.1:6379`},
		{"release --key k --force extra", `redlock release: unexpected argument "extra"`},
	} {
		args := strings.Fields(tt.args)
		r := redlockCmd(t, bin, nil, args...)
		assert.Equal(t, exitUsage, r.status, tt.args)
		assert.Equal(t, tt.stderr+"\n(redlock help "+args[0]+" for usage)\n", r.stderr, tt.args)
	}
}

// A bad master URL is blamed on where it came from: --addrs when given,
// LOCK_DISTRIBUTED_NODES only when the URL came from there; never with
// its password.
func TestBadAddrsNamesItsSource(t *testing.T) {
	bin := buildRedlock(t)
	const pw = "pa55w0rd"
	bad := []string{
		"redis://:" + pw + "@127.0.0.1:6379/db", // a bad database
		"redis://:" + pw + "@127.0.0.1:99999x",  // a bad port
		"redis://:pa55/w0rd@127.0.0.1:6379",     // an unescaped '/' in the password
		"127.0.0.1:6379,redis://:" + pw + "@[::1",
		"redis://:pa55,w0rd@127.0.0.1:6379", // a ',' in the password cuts the URL
	}
	tails := map[string][]string{
		"run":     {"--key", "k", "--", "true"},
		"elect":   {"--name", "n", "--", "true"},
		"inspect": {"--key", "k"},
		"release": {"--key", "k", "--force"},
	}
	check := func(r result, what, names, notNames string) {
		t.Helper()
		assert.Equal(t, exitUsage, r.status, "%s: %s", what, r.stderr)
		assert.Contains(t, r.stderr, ": "+names+": ", what)
		assert.NotContains(t, r.stderr, notNames, what)
		for _, piece := range []string{"pa55", "w0rd"} {
			assert.NotContains(t, r.stderr, piece, what)
		}
	}
	for cmd, tail := range tails {
		for _, addrs := range bad {
			what := cmd + " --addrs " + addrs
			r := redlockCmd(t, bin, nil, append([]string{cmd, "--addrs", addrs}, tail...)...)
			check(r, what, "--addrs", "LOCK_DISTRIBUTED_NODES")
			// A good LOCK_DISTRIBUTED_NODES does not change whom --addrs blames.
			r = redlockCmd(t, bin, []string{"LOCK_DISTRIBUTED_NODES=redis://127.0.0.1:6379"}, append([]string{cmd, "--addrs", addrs}, tail...)...)
			check(r, what+" (variable set)", "--addrs", "LOCK_DISTRIBUTED_NODES")

			what = "LOCK_DISTRIBUTED_NODES=" + addrs + " " + cmd
			r = redlockCmd(t, bin, []string{"LOCK_DISTRIBUTED_NODES=" + addrs}, append([]string{cmd}, tail...)...)
			check(r, what, "LOCK_DISTRIBUTED_NODES", "--addrs")
		}
	}
}

// The exit statuses are one constant block, each of them a row of the
// table that every help prints.
func TestExitStatusTable(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "exit.go", nil, 0)
	require.NoError(t, err)
	statuses := map[string]string{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			v := s.(*ast.ValueSpec)
			for i, n := range v.Names {
				if lit, ok := v.Values[i].(*ast.BasicLit); ok && lit.Kind == token.INT && strings.HasPrefix(n.Name, "exit") {
					statuses[n.Name] = lit.Value
				}
			}
		}
	}
	require.Len(t, statuses, 9)
	var rows []string
	for _, m := range regexp.MustCompile(`(?m)^ +(\d+)  `).FindAllStringSubmatch(exitStatusHelp, -1) {
		rows = append(rows, m[1])
	}
	var values []string
	for _, v := range statuses {
		values = append(values, v)
	}
	assert.ElementsMatch(t, values, rows, "one row per status")
	// No command returns an exit status written as a number.
	files, err := os.ReadDir(".")
	require.NoError(t, err)
	literal := regexp.MustCompile(`(?m)\breturn (?:[2-9]|\d\d+)$|\bos\.Exit\(\d`)
	for _, e := range files {
		if e.Name() == "exit.go" || !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		src, err := os.ReadFile(e.Name())
		require.NoError(t, err)
		assert.Empty(t, literal.FindAllString(string(src), -1), e.Name())
	}
}

// The package documentation has a line for every command.
func TestDocListsEveryCommand(t *testing.T) {
	src, err := os.ReadFile("main.go")
	require.NoError(t, err)
	doc, _, _ := strings.Cut(string(src), "package main")
	for _, c := range commands {
		assert.Regexp(t, `(?m)^//\tredlock `+c.name+` `, doc)
	}
	assert.Regexp(t, `(?m)^//\tredlock help `, doc)
}
