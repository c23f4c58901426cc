package envconfig

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"
)

// Lookup returns a lookup function for Load that reads the
// process environment first and, for a variable it does not set, the
// .env files in the order given (the first file that sets it wins).
// Real environment variables therefore override the files, which is how
// a deployment overrides a checked-in default. A variable set to the
// empty string counts as unset, here as in Load.
//
// Every file must exist and parse (see ParseDotEnv); an error names the
// file and, for a syntax error, the line. Files are read once, now.
func Lookup(dotenv ...string) (func(string) (string, bool), error) {
	files := make([]map[string]string, 0, len(dotenv))
	for _, path := range dotenv {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("envconfig: .env file: %w", err)
		}
		vars, err := ParseDotEnv(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		files = append(files, vars)
	}
	return func(name string) (string, bool) {
		if v, ok := os.LookupEnv(name); ok && strings.TrimSpace(v) != "" {
			return v, true
		}
		for _, vars := range files {
			if v, ok := vars[name]; ok && strings.TrimSpace(v) != "" {
				return v, true
			}
		}
		return "", false
	}, nil
}

// ParseDotEnv reads KEY=VALUE lines in the common .env syntax, a subset
// of the shell's that needs no evaluation:
//
//	# a comment, and blank lines, are skipped
//	export LOCK_DISTRIBUTED_ENABLED=true   # "export " is allowed; so is a trailing comment
//	LOCK_DISTRIBUTED_NODES="redis://10.0.0.1:6379,redis://10.0.0.2:6379"
//	NAME='single quotes keep everything literally, # included'
//
// A key is letters, digits and underscores, not starting with a digit.
// An unquoted value ends at the end of the line or at a '#' preceded by
// a blank, and is trimmed. A double-quoted value may contain \" \\ \n \t
// and \r escapes; a single-quoted value is taken as is. A value never
// spans lines, and nothing is expanded ($VAR is kept as written). A later
// line for the same key replaces an earlier one.
//
// A line that is none of these (no '=', a bad key, an unterminated
// quote, text after the closing quote) is an error matching
// redlock.ErrInvalid that names the line number and what is wrong, and
// quotes nothing of the line but a valid variable name: a .env file holds
// passwords, and a malformed line may be one.
func ParseDotEnv(r io.Reader) (map[string]string, error) {
	vars := make(map[string]string)
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		if rest, ok := strings.CutPrefix(line, "export"); ok && rest != "" && (rest[0] == ' ' || rest[0] == '\t') {
			line = strings.TrimSpace(rest)
		}
		key, raw, ok := strings.Cut(line, "=")
		if !ok {
			return nil, invalidf(".env line %d: want KEY=VALUE, found no '='", n)
		}
		key = strings.TrimSpace(key)
		if !validEnvKey(key) {
			return nil, invalidf(".env line %d: bad variable name before '=' (want letters, digits and '_', not starting with a digit)", n)
		}
		value, err := dotEnvValue(strings.TrimSpace(raw))
		if err != nil {
			return nil, invalidf(".env line %d: %s: %v", n, key, err)
		}
		vars[key] = value
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("envconfig: reading .env: %w", err)
	}
	return vars, nil
}

func validEnvKey(k string) bool {
	if k == "" || (k[0] >= '0' && k[0] <= '9') {
		return false
	}
	for _, c := range []byte(k) {
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// dotEnvValue decodes the text after '=' (already trimmed).
func dotEnvValue(s string) (string, error) {
	if s == "" {
		return "", nil
	}
	var (
		value string
		rest  string
	)
	switch s[0] {
	case '\'':
		end := strings.IndexByte(s[1:], '\'')
		if end < 0 {
			return "", fmt.Errorf("unterminated single quote")
		}
		value, rest = s[1:1+end], s[2+end:]
	case '"':
		var b strings.Builder
		i := 1
		for ; i < len(s) && s[i] != '"'; i++ {
			if s[i] != '\\' || i+1 == len(s) {
				b.WriteByte(s[i])
				continue
			}
			i++
			switch s[i] {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case 'r':
				b.WriteByte('\r')
			case '"', '\\':
				b.WriteByte(s[i])
			default:
				b.WriteByte('\\')
				b.WriteByte(s[i])
			}
		}
		if i == len(s) {
			return "", fmt.Errorf("unterminated double quote")
		}
		value, rest = b.String(), s[i+1:]
	default:
		for i := 1; i < len(s); i++ {
			if s[i] == '#' && (s[i-1] == ' ' || s[i-1] == '\t') {
				s = s[:i]
				break
			}
		}
		return strings.TrimSpace(s), nil
	}
	if rest = strings.TrimSpace(rest); rest != "" && rest[0] != '#' {
		return "", fmt.Errorf("unexpected text after the closing quote")
	}
	return value, nil
}
