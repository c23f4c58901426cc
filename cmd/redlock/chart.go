package main

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"strings"
	"time"
)

// writeChart draws p50 and p99 Lock+Unlock latency against N: Redlock as
// lines, Single as squares at its one node. It uses only the standard
// library and a built-in 5×7 pixel font, so the library pulls in no
// plotting dependency.
func writeChart(path string, rs []benchResult) error {
	img := drawChart(rs)
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
	white = color.RGBA{255, 255, 255, 255}
	black = color.RGBA{0, 0, 0, 255}
	grey  = color.RGBA{220, 220, 220, 255}
	blue  = color.RGBA{30, 90, 200, 255}
	red   = color.RGBA{200, 40, 40, 255}
)

const (
	chartW, chartH = 760, 460
	left, right    = 110, 30
	top, bottom    = 60, 70
	scale          = 2 // font pixels per glyph pixel
)

func drawChart(rs []benchResult) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, chartW, chartH))
	fill(img, img.Bounds(), white)

	var maxLat time.Duration
	minN, maxN := math.MaxInt, 0
	for _, r := range rs {
		maxLat = max(maxLat, r.p99)
		minN, maxN = min(minN, r.n), max(maxN, r.n)
	}
	unit, unitName := time.Microsecond, "LATENCY (µS)"
	if maxLat >= 10*time.Millisecond {
		unit, unitName = time.Millisecond, "LATENCY (MS)"
	}
	yMax, yStep := niceScale(float64(maxLat) / float64(unit))
	plot := image.Rect(left, top, chartW-right, chartH-bottom)
	x := func(n int) int {
		if maxN == minN {
			return (plot.Min.X + plot.Max.X) / 2
		}
		pad := 30
		return plot.Min.X + pad + (n-minN)*(plot.Dx()-2*pad)/(maxN-minN)
	}
	y := func(d time.Duration) int {
		v := float64(d) / float64(unit)
		return plot.Max.Y - int(v/yMax*float64(plot.Dy()))
	}

	// Grid, axes, ticks and labels.
	for v := 0.0; v <= yMax+yStep/2; v += yStep {
		py := plot.Max.Y - int(v/yMax*float64(plot.Dy()))
		hline(img, plot.Min.X, plot.Max.X, py, grey)
		label := trimFloat(v)
		text(img, plot.Min.X-8-textWidth(label), py-7*scale/2, label, black)
	}
	hline(img, plot.Min.X, plot.Max.X, plot.Max.Y, black)
	vline(img, plot.Min.X, plot.Min.Y, plot.Max.Y, black)
	seen := map[int]bool{}
	for _, r := range rs {
		if seen[r.n] {
			continue
		}
		seen[r.n] = true
		px := x(r.n)
		vline(img, px, plot.Max.Y, plot.Max.Y+6, black)
		l := fmt.Sprint(r.n)
		text(img, px-textWidth(l)/2, plot.Max.Y+12, l, black)
	}
	title := "LOCK+UNLOCK LATENCY AGAINST N"
	text(img, (chartW-textWidth(title))/2, 18, title, black)
	xl := "N (MASTERS)"
	text(img, (plot.Min.X+plot.Max.X-textWidth(xl))/2, chartH-30, xl, black)
	text(img, 8, top-30, unitName, black)

	// Series: Redlock as lines with dots, Single as squares.
	var prev50, prev99 image.Point
	first := true
	for _, r := range rs {
		if r.impl != "redlock" {
			continue
		}
		p50 := image.Pt(x(r.n), y(r.p50))
		p99 := image.Pt(x(r.n), y(r.p99))
		if !first {
			line(img, prev50, p50, blue)
			line(img, prev99, p99, red)
		}
		dot(img, p50, blue)
		dot(img, p99, red)
		prev50, prev99, first = p50, p99, false
	}
	for _, r := range rs {
		if r.impl == "single" {
			square(img, image.Pt(x(r.n), y(r.p50)), blue)
			square(img, image.Pt(x(r.n), y(r.p99)), red)
		}
	}

	// Legend, top left inside the plot.
	lx, ly := plot.Min.X+16, plot.Min.Y+10
	line(img, image.Pt(lx, ly+7), image.Pt(lx+24, ly+7), red)
	text(img, lx+32, ly, "REDLOCK P99", black)
	line(img, image.Pt(lx, ly+27), image.Pt(lx+24, ly+27), blue)
	text(img, lx+32, ly+20, "REDLOCK P50", black)
	square(img, image.Pt(lx+12, ly+47), red)
	square(img, image.Pt(lx+12, ly+47), red)
	text(img, lx+32, ly+40, "SINGLE P99", black)
	square(img, image.Pt(lx+12, ly+67), blue)
	text(img, lx+32, ly+60, "SINGLE P50", black)
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
	'=': "..........#####.....#####..........",
	'/': ".....#...#...#...#...#...#.........",
	':': "......##...##........##...##.......",
	'?': ".###.#...#....#...#....#.........#.",
}
