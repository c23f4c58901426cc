package main

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"slices"
	"strings"
	"time"
)

// writeChart draws p50 and p99 Lock+Unlock latency against N: Redlock as
// lines, Single as squares at its one node. It uses only the standard
// library and a built-in 5×7 pixel font, so the library pulls in no
// plotting dependency.
func writeChart(path string, rs []benchResult) error {
	return writePNG(path, drawChart(rs))
}

func writePNG(path string, img image.Image) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return fmt.Errorf("chart: %w", err)
	}
	return f.Close()
}

var (
	white  = color.RGBA{255, 255, 255, 255}
	black  = color.RGBA{0, 0, 0, 255}
	grey   = color.RGBA{220, 220, 220, 255}
	blue   = color.RGBA{30, 90, 200, 255}
	red    = color.RGBA{200, 40, 40, 255}
	green  = color.RGBA{30, 150, 60, 255}
	purple = color.RGBA{130, 60, 180, 255}
	orange = color.RGBA{230, 130, 20, 255}
	teal   = color.RGBA{20, 150, 160, 255}
	brown  = color.RGBA{120, 80, 40, 255}
)

const (
	chartW, chartH = 760, 460
	left, right    = 110, 30
	top, bottom    = 60, 70
	scale          = 2 // font pixels per glyph pixel
)

// A series is one curve of a chart: a value per node count, drawn as a
// line through dots, or as squares alone.
type series struct {
	name    string
	color   color.RGBA
	squares bool
	points  []point // in increasing n
}

type point struct {
	n int
	v float64
}

// plot is a chart of series against N (masters).
type plot struct {
	title, unit string // unit labels the y axis
	series      []series
	legendRight bool // the legend at the top right (top left otherwise)
}

func drawChart(rs []benchResult) *image.RGBA {
	var maxLat time.Duration
	for _, r := range rs {
		maxLat = max(maxLat, r.p99)
	}
	unit, unitName := time.Microsecond, "LATENCY (µS)"
	if maxLat >= 10*time.Millisecond {
		unit, unitName = time.Millisecond, "LATENCY (MS)"
	}
	v := func(d time.Duration) float64 { return float64(d) / float64(unit) }
	p := plot{title: "LOCK+UNLOCK LATENCY AGAINST N", unit: unitName, series: []series{
		{name: "REDLOCK P99", color: red}, {name: "REDLOCK P50", color: blue},
		{name: "SINGLE P99", color: red, squares: true}, {name: "SINGLE P50", color: blue, squares: true},
	}}
	for _, r := range rs {
		i := 0
		switch r.impl {
		case "redlock":
		case "single":
			i = 2
		default:
			continue
		}
		p.series[i].points = append(p.series[i].points, point{r.n, v(r.p99)})
		p.series[i+1].points = append(p.series[i+1].points, point{r.n, v(r.p50)})
	}
	return p.draw()
}

func (p plot) draw() *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, chartW, chartH))
	fill(img, img.Bounds(), white)

	maxV := 0.0
	minN, maxN := math.MaxInt, 0
	var ns []int
	for _, s := range p.series {
		for _, pt := range s.points {
			maxV = max(maxV, pt.v)
			minN, maxN = min(minN, pt.n), max(maxN, pt.n)
			if !slices.Contains(ns, pt.n) {
				ns = append(ns, pt.n)
			}
		}
	}
	yMax, yStep := niceScale(maxV)
	area := image.Rect(left, top, chartW-right, chartH-bottom)
	x := func(n int) int {
		if maxN <= minN {
			return (area.Min.X + area.Max.X) / 2
		}
		pad := 30
		return area.Min.X + pad + (n-minN)*(area.Dx()-2*pad)/(maxN-minN)
	}
	y := func(v float64) int {
		return area.Max.Y - int(v/yMax*float64(area.Dy()))
	}

	// Grid, axes, ticks and labels.
	for v := 0.0; v <= yMax+yStep/2; v += yStep {
		py := area.Max.Y - int(v/yMax*float64(area.Dy()))
		hline(img, area.Min.X, area.Max.X, py, grey)
		label := trimFloat(v)
		text(img, area.Min.X-8-textWidth(label), py-7*scale/2, label, black)
	}
	hline(img, area.Min.X, area.Max.X, area.Max.Y, black)
	vline(img, area.Min.X, area.Min.Y, area.Max.Y, black)
	for _, n := range ns {
		px := x(n)
		vline(img, px, area.Max.Y, area.Max.Y+6, black)
		l := fmt.Sprint(n)
		text(img, px-textWidth(l)/2, area.Max.Y+12, l, black)
	}
	text(img, (chartW-textWidth(p.title))/2, 18, p.title, black)
	xl := "N (MASTERS)"
	text(img, (area.Min.X+area.Max.X-textWidth(xl))/2, chartH-30, xl, black)
	text(img, 8, top-30, p.unit, black)

	// Series: lines through dots, or squares.
	for _, s := range p.series {
		var prev image.Point
		for i, pt := range s.points {
			at := image.Pt(x(pt.n), y(pt.v))
			if s.squares {
				square(img, at, s.color)
				continue
			}
			if i > 0 {
				line(img, prev, at, s.color)
			}
			dot(img, at, s.color)
			prev = at
		}
	}

	// Legend, at the top inside the plot area.
	lx, ly := area.Min.X+16, area.Min.Y+10
	if p.legendRight {
		widest := 0
		for _, s := range p.series {
			widest = max(widest, textWidth(s.name))
		}
		lx = area.Max.X - 16 - 32 - widest
		// Over the curves: a white ground keeps it legible.
		fill(img, image.Rect(lx-6, ly-6, area.Max.X-8, ly+20*len(p.series)), white)
	}
	for i, s := range p.series {
		yy := ly + 20*i
		if s.squares {
			square(img, image.Pt(lx+12, yy+7), s.color)
		} else {
			line(img, image.Pt(lx, yy+7), image.Pt(lx+24, yy+7), s.color)
		}
		text(img, lx+32, yy, s.name, black)
	}
	return img
}

// niceScale returns an axis maximum at or above v and a step that divides
// it into four or five round parts.
func niceScale(v float64) (maxV, step float64) {
	if v <= 0 {
		return 1, 0.25
	}
	raw := v / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		step = m * mag
		if step >= raw {
			break
		}
	}
	return math.Ceil(v/step) * step, step
}

func trimFloat(v float64) string {
	s := fmt.Sprintf("%.2f", v)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s
}

func fill(img *image.RGBA, r image.Rectangle, c color.RGBA) {
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			img.SetRGBA(x, y, c)
		}
	}
}

func hline(img *image.RGBA, x0, x1, y int, c color.RGBA) { fill(img, image.Rect(x0, y, x1+1, y+1), c) }
func vline(img *image.RGBA, x, y0, y1 int, c color.RGBA) { fill(img, image.Rect(x, y0, x+1, y1+1), c) }

// line draws a two-pixel-thick segment (Bresenham).
func line(img *image.RGBA, a, b image.Point, c color.RGBA) {
	dx, dy := abs(b.X-a.X), -abs(b.Y-a.Y)
	sx, sy := sign(b.X-a.X), sign(b.Y-a.Y)
	e := dx + dy
	for p := a; ; {
		fill(img, image.Rect(p.X, p.Y, p.X+2, p.Y+2), c)
		if p == b {
			return
		}
		e2 := 2 * e
		if e2 >= dy {
			e += dy
			p.X += sx
		}
		if e2 <= dx {
			e += dx
			p.Y += sy
		}
	}
}

func dot(img *image.RGBA, p image.Point, c color.RGBA) {
	fill(img, image.Rect(p.X-4, p.Y-4, p.X+5, p.Y+5), c)
}

func square(img *image.RGBA, p image.Point, c color.RGBA) {
	r := image.Rect(p.X-6, p.Y-6, p.X+7, p.Y+7)
	for i := range 2 {
		hline(img, r.Min.X, r.Max.X-1, r.Min.Y+i, c)
		hline(img, r.Min.X, r.Max.X-1, r.Max.Y-1-i, c)
		vline(img, r.Min.X+i, r.Min.Y, r.Max.Y-1, c)
		vline(img, r.Max.X-1-i, r.Min.Y, r.Max.Y-1, c)
	}
}

func abs(v int) int { return max(v, -v) }

func sign(v int) int {
	switch {
	case v > 0:
		return 1
	case v < 0:
		return -1
	}
	return 0
}

func textWidth(s string) int { return len([]rune(s)) * 6 * scale }

// text draws s in the 5×7 font, upper case, with (x, y) its top left.
func text(img *image.RGBA, x, y int, s string, c color.RGBA) {
	for _, r := range s {
		if 'a' <= r && r <= 'z' {
			r -= 'a' - 'A'
		}
		g, ok := glyphs[r]
		if !ok {
			g = glyphs['?']
		}
		for row := range 7 {
			for col := range 5 {
				if g[row*5+col] == '#' {
					fill(img, image.Rect(x+col*scale, y+row*scale, x+(col+1)*scale, y+(row+1)*scale), c)
				}
			}
		}
		x += 6 * scale
	}
}

// glyphs is a 5×7 pixel font: seven rows of five, '#' for ink.
var glyphs = map[rune]string{
	' ': "...................................",
	'0': ".###.#...##..###.#.###..##...#.###.",
	'1': "..#...##....#....#....#....#...###.",
	'2': ".###.#...#....#...#...#...#...#####",
	'3': "#####...#...#.....#.....##...#.###.",
	'4': "...#...##..#.#.#..#.#####...#....#.",
	'5': "######....####.....#....##...#.###.",
	'6': "..##..#...#....####.#...##...#.###.",
	'7': "#####....#...#...#...#....#....#...",
	'8': ".###.#...##...#.###.#...##...#.###.",
	'9': ".###.#...##...#.####....#...#..##..",
	'A': ".###.#...##...#######...##...##...#",
	'B': "####.#...##...#####.#...##...#####.",
	'C': ".###.#...##....#....#....#...#.###.",
	'D': "###..#..#.#...##...##...##..#.###..",
	'E': "######....#....####.#....#....#####",
	'F': "######....#....####.#....#....#....",
	'G': ".###.#...##....#.####...##...#.####",
	'H': "#...##...##...#######...##...##...#",
	'I': ".###...#....#....#....#....#...###.",
	'J': "..###...#....#....#....#.#..#..##..",
	'K': "#...##..#.#.#..##...#.#..#..#.#...#",
	'L': "#....#....#....#....#....#....#####",
	'M': "#...###.###.#.##...##...##...##...#",
	'N': "#...##...###..##.#.##..###...##...#",
	'O': ".###.#...##...##...##...##...#.###.",
	'P': "####.#...##...#####.#....#....#....",
	'Q': ".###.#...##...##...##.#.##..#..##.#",
	'R': "####.#...##...#####.#.#..#..#.#...#",
	'S': ".#####....#.....###.....#....#####.",
	'T': "#####..#....#....#....#....#....#..",
	'U': "#...##...##...##...##...##...#.###.",
	'V': "#...##...##...##...##...#.#.#...#..",
	'W': "#...##...##...##.#.##.#.##.#.#.#.#.",
	'X': "#...##...#.#.#...#...#.#.#...##...#",
	'Y': "#...##...#.#.#...#....#....#....#..",
	'Z': "#####....#...#...#...#...#....#####",
	'µ': ".....#...##...##...##..###.##.#....",
	'(': "...#...#...#....#....#.....#.....#.",
	')': ".#.....#.....#....#....#...#...#...",
	'+': ".......#....#..#####..#....#.......",
	'-': "...............#####...............",
	'.': "..............................##...",
	',': "......................##....#...#..",
	'=': "..........#####.....#####..........",
	'/': ".....#...#...#...#...#...#.........",
	':': "......##...##........##...##.......",
	'?': ".###.#...#....#...#....#.........#.",
}
