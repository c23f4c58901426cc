package respguard

import "bytes"

// parser follows a RESP2/RESP3 byte stream fed to it in pieces of any
// size and reports where top-level values start and end. It reads the
// framing only: lengths and type bytes, never a value's content beyond
// what capture asks for. It allocates nothing after its stack has grown
// to the stream's deepest nesting.
type parser struct {
	limits Limits
	seen   observer

	state  uint8
	kind   byte  // type byte of the header being read
	length int64 // the header's length, as read so far
	neg    bool
	cr     bool // the header's CR was read: only its LF may follow
	digits int
	skip   int64 // body bytes still to skip, CRLF included
	stack  []level

	// capture keeps the first two bulk strings of a top-level array:
	// a request's command name and its first argument.
	capture bool
	args    [2][16]byte
	argLen  [2]int
	argAt   int // which of args the current body fills, or -1
}

// level is an aggregate still open: how many elements it waits for.
type level struct {
	left  int64
	total int64
	attr  bool // an attribute: it precedes a value and is not one
}

// observer hears a top-level value begin and end. start may refuse it.
type observer interface {
	start(kind byte) error
	end()
}

const (
	atType   uint8 = iota // the next byte is a type byte
	inLine                // skipping a line to its LF
	inLength              // reading a length up to its LF
	inBody                // skipping a bulk body
)

// maxDigits bounds a length's digits: more than int64 holds is garbage.
const maxDigits = 19

func (p *parser) feed(b []byte) error {
	for len(b) > 0 {
		switch p.state {
		case atType:
			if err := p.typeByte(b[0]); err != nil {
				return err
			}
			b = b[1:]
		case inLine:
			i := bytes.IndexByte(b, '\n')
			if i < 0 {
				return nil
			}
			b = b[i+1:]
			p.state = atType
			p.valueDone()
		case inLength:
			c := b[0]
			b = b[1:]
			if err := p.lengthByte(c); err != nil {
				return err
			}
		case inBody:
			n := int64(len(b))
			if n > p.skip {
				n = p.skip
			}
			p.keep(b[:n])
			p.skip -= n
			b = b[n:]
			if p.skip == 0 {
				p.state = atType
				p.valueDone()
			}
		}
	}
	return nil
}

func (p *parser) typeByte(c byte) error {
	switch c {
	case '+', '-', ':', '_', ',', '#', '(':
		p.state = inLine
	case '$', '!', '=', '*', '~', '%', '|', '>':
		p.state = inLength
		p.length, p.neg, p.cr, p.digits = 0, false, false, 0
	default:
		return refusal("the type byte %q", c)
	}
	p.kind = c
	if len(p.stack) == 0 {
		return p.seen.start(c)
	}
	return nil
}

func (p *parser) lengthByte(c byte) error {
	if p.cr && c != '\n' {
		return refusal("the byte %q after a CR in a %q header", c, p.kind)
	}
	switch {
	case c >= '0' && c <= '9':
		p.digits++
		if p.digits > maxDigits {
			return refusal("a length of more than %d digits", maxDigits)
		}
		p.length = p.length*10 + int64(c-'0')
	case c == '-' && p.digits == 0 && !p.neg:
		p.neg = true
	case c == '\r':
		p.cr = true
	case c == '\n':
		if p.digits == 0 {
			return refusal("a %q header without a length", p.kind)
		}
		return p.header()
	default:
		return refusal("the byte %q in a %q length", c, p.kind)
	}
	return nil
}

// header acts on a complete length header.
func (p *parser) header() error {
	n := p.length
	if p.neg {
		if n != 1 {
			return refusal("the length -%d", n)
		}
		// -1: a RESP2 null string or array, a complete value.
		p.state = atType
		p.valueDone()
		return nil
	}
	switch p.kind {
	case '$', '!', '=':
		if n > p.limits.MaxBulk {
			return refusal("a string of %d bytes, over the limit of %d", n, p.limits.MaxBulk)
		}
		p.state, p.skip = inBody, n+2
		p.argAt = p.argSlot()
		return nil
	}
	if n > p.limits.MaxElements {
		return refusal("an aggregate of %d elements, over the limit of %d", n, p.limits.MaxElements)
	}
	p.state = atType
	if p.kind == '%' || p.kind == '|' {
		n *= 2
	}
	if n == 0 {
		if p.kind == '|' {
			return nil // an empty attribute: the value follows
		}
		p.valueDone()
		return nil
	}
	p.stack = append(p.stack, level{left: n, total: n, attr: p.kind == '|'})
	return nil
}

// valueDone closes a value and every aggregate it completes; a value
// that completes the top level is reported to the observer.
func (p *parser) valueDone() {
	for n := len(p.stack); n > 0; n = len(p.stack) {
		top := &p.stack[n-1]
		top.left--
		if top.left > 0 {
			return
		}
		attr := top.attr
		p.stack = p.stack[:n-1]
		if attr {
			return // the attribute is over; the value it annotates follows
		}
	}
	p.seen.end()
	p.argLen = [2]int{}
}

// argSlot says which captured argument a bulk string starting now is.
func (p *parser) argSlot() int {
	if !p.capture || len(p.stack) != 1 {
		return -1
	}
	i := p.stack[0].total - p.stack[0].left
	if i > 1 {
		return -1
	}
	return int(i)
}

// keep copies the start of a captured argument from b, the next bytes
// of its body; the body's closing CRLF is not kept.
func (p *parser) keep(b []byte) {
	if p.argAt < 0 {
		return
	}
	if content := p.skip - 2; int64(len(b)) > content {
		b = b[:max(content, 0)]
	}
	n := copy(p.args[p.argAt][p.argLen[p.argAt]:], b)
	p.argLen[p.argAt] += n
}

// arg is the start of captured argument i: at most 16 bytes.
func (p *parser) arg(i int) []byte { return p.args[i][:p.argLen[i]] }
