# chaos.gp - one chaos row's timeline, drawn by loadtest/chaos from its buckets:
#
#   gnuplot -e "dat='row.dat'; png='row.png'; title='...'; f0=2.5; f1=5.1" chaos.gp
#
# dat: one line per 100 ms of the load, "second sold failed": how many requests sent in that
# tenth of a second answered 200, and how many answered anything else (or nothing). The
# fault's window, from its injection (f0, seconds) to its end (f1), is shaded. What a learner
# reads off it: when the sales stop, for how long, and how they come back.

set terminal pngcairo size 900,300 font "DejaVu Sans,9"
set output png
set title title
set xlabel "seconds since the load began (by when each request was sent)"
set ylabel "requests per 100 ms"
set grid ytics
set yrange [0:*]
set key top right
set style fill transparent solid 0.25 noborder
set object 1 rect from f0, graph 0 to f1, graph 1 fc rgb "#f4a582" behind
set label 1 "fault" at f0, graph 0.93 offset 0.5,0
plot dat using 1:2 with lines lw 2 lc rgb "#1a9850" title "200 (sold)", \
     dat using 1:3 with lines lw 2 lc rgb "#d73027" title "not 200 (refused, failed, no answer)"
