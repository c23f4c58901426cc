package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// cmdFlags is a command's flag set. A refused flag is one line on stderr
// that names the flag and gives an example value, then a hint pointing to
// the command's help, and exitUsage; -h, --help or a lone "help" prints
// the command's help, its flags and the exit statuses on stdout.
type cmdFlags struct {
	*flag.FlagSet
	cmd            string // the command's name, such as "run"
	help           string // the text above the list of flags
	stdout, stderr io.Writer
	bad            string // why the first refused value was refused
}

// newFlags returns the flag set of the command cmd, whose help text
// (without flags or exit statuses) is help.
func newFlags(cmd, help string, stdout, stderr io.Writer) *cmdFlags {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // parse words every error itself
	fs.Usage = func() {}
	return &cmdFlags{FlagSet: fs, cmd: cmd, help: help, stdout: stdout, stderr: stderr}
}

// parse parses args. When ok is false the command must stop and exit
// with status: 0 after printing the help, exitUsage after saying on
// stderr what is wrong.
func (c *cmdFlags) parse(args []string) (status int, ok bool) {
	if len(args) == 1 && args[0] == "help" {
		args = []string{"-h"}
	}
	err := c.Parse(args)
	switch {
	case err == nil:
		return exitOK, true
	case errors.Is(err, flag.ErrHelp):
		c.printHelp(c.stdout)
		return exitOK, false
	case c.bad != "":
		return c.usage("%s", c.bad), false
	}
	return c.usage("%s", c.parseError(err)), false
}

// usage says on stderr what is wrong with the command line, and where to
// read how to use it; it returns exitUsage.
func (c *cmdFlags) usage(format string, a ...any) int {
	fmt.Fprintf(c.stderr, "redlock %s: %s\n(redlock help %s for usage)\n", c.cmd, fmt.Sprintf(format, a...), c.cmd)
	return exitUsage
}

// parseError words an error of the flag package that no flag's value
// produced: an unknown flag, or a flag without its value.
func (c *cmdFlags) parseError(err error) string {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		return "unknown flag --" + name
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		if f := c.Lookup(name); f != nil {
			if w, ok := f.Value.(interface{ want() string }); ok {
				return fmt.Sprintf("--%s needs a value: want %s", name, w.want())
			}
		}
		return fmt.Sprintf("--%s needs a value", name)
	}
	return msg
}

// refuse records that flag name refused value, wanting want, and returns
// the error for the flag package (parse prints the record instead).
func (c *cmdFlags) refuse(name, value, want string) error {
	msg := fmt.Sprintf("--%s %q: want %s", name, value, want)
	if c.bad == "" {
		c.bad = msg
	}
	return errors.New(msg)
}

// printHelp writes the help, the flags and the exit statuses to w.
func (c *cmdFlags) printHelp(w io.Writer) {
	fmt.Fprint(w, c.help, "\nflags:\n")
	c.VisitAll(func(f *flag.Flag) {
		kind, usage := flag.UnquoteUsage(f)
		if k, ok := f.Value.(interface{ kind() string }); ok {
			kind = k.kind()
		}
		fmt.Fprintf(w, "  --%s", f.Name)
		if kind != "" {
			fmt.Fprintf(w, " %s", kind)
		}
		fmt.Fprintf(w, "\n    \t%s", strings.ReplaceAll(usage, "\n", "\n    \t"))
		switch f.DefValue {
		case "", "0", "0s", "false", "[]":
		default:
			if kind == "string" {
				fmt.Fprintf(w, " (default %q)", f.DefValue)
			} else {
				fmt.Fprintf(w, " (default %s)", f.DefValue)
			}
		}
		fmt.Fprintln(w)
	})
	fmt.Fprint(w, "\n", exitStatusHelp)
}

// durationExample ends every message about a duration flag's value.
const durationExample = "such as 10s or 1m30s"

// Duration defines a duration flag that refuses a negative value, and
// also 0 when positive is set.
func (c *cmdFlags) Duration(p *time.Duration, name string, def time.Duration, positive bool, usage string) {
	*p = def
	c.Var(&durationValue{c: c, name: name, p: p, positive: positive}, name, usage)
}

type durationValue struct {
	c        *cmdFlags
	name     string
	p        *time.Duration
	positive bool
}

func (v *durationValue) Set(s string) error {
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		return v.c.refuse(v.name, s, "a duration "+durationExample)
	case v.positive && d <= 0, d < 0:
		return v.c.refuse(v.name, s, v.want())
	}
	*v.p = d
	return nil
}

func (v *durationValue) want() string {
	if v.positive {
		return "a duration above 0, " + durationExample
	}
	return "a duration of 0 or more, " + durationExample
}

func (v *durationValue) String() string {
	if v == nil || v.p == nil {
		return "0s"
	}
	return v.p.String()
}

func (*durationValue) kind() string { return "duration" }

// Int defines an integer flag that refuses a value below least; example
// is a value to show in messages.
func (c *cmdFlags) Int(p *int, name string, def, least, example int, usage string) {
	*p = def
	c.Var(&intValue{c: c, name: name, p: p, least: least, example: example}, name, usage)
}

type intValue struct {
	c              *cmdFlags
	name           string
	p              *int
	least, example int
}

func (v *intValue) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < v.least {
		return v.c.refuse(v.name, s, v.want())
	}
	*v.p = n
	return nil
}

func (v *intValue) want() string {
	return fmt.Sprintf("a whole number of %d or more, such as %d", v.least, v.example)
}

func (v *intValue) String() string {
	if v == nil || v.p == nil {
		return "0"
	}
	return strconv.Itoa(*v.p)
}

func (*intValue) kind() string { return "int" }

// Bool defines a boolean flag: --name alone, or --name=true or false.
func (c *cmdFlags) Bool(p *bool, name string, usage string) {
	c.Var(&boolValue{c: c, name: name, p: p}, name, usage)
}

type boolValue struct {
	c    *cmdFlags
	name string
	p    *bool
}

func (v *boolValue) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return v.c.refuse(v.name, s, v.want())
	}
	*v.p = b
	return nil
}

func (*boolValue) want() string { return "true or false" }

func (v *boolValue) String() string {
	if v == nil || v.p == nil {
		return "false"
	}
	return strconv.FormatBool(*v.p)
}

func (*boolValue) IsBoolFlag() bool { return true }

func (*boolValue) kind() string { return "" }

// Strings defines a string flag that may be given several times; every
// value is appended to *p.
func (c *cmdFlags) Strings(p *[]string, name string, usage string) {
	c.Var(&stringsValue{p: p}, name, usage)
}

type stringsValue struct{ p *[]string }

func (v *stringsValue) Set(s string) error {
	*v.p = append(*v.p, s)
	return nil
}

func (v *stringsValue) String() string {
	if v == nil || v.p == nil {
		return ""
	}
	return strings.Join(*v.p, ",")
}

func (*stringsValue) kind() string { return "string" }
