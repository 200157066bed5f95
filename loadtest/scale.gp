# scale.gp - the scaling report's chart, drawn by loadtest/scale:
#
#   gnuplot -e "csv='chart.csv'; cluster='chart-cluster.csv'; png='chart.png'; svg='chart.svg'; title='...'" scale.gp
#
# csv: one line per replica count, "replicas,redis_rps,pg_atomic_rps" (100 goods, through
# nginx); cluster: one line "3,redis_rps,pg_atomic_rps" measured against a Redis Cluster, or
# "3,," when the cluster was not measured (then nothing is drawn for it).

if (!exists("title")) title = "throughput against replicas"

set datafile separator ","
set datafile missing ""
set grid
set yrange [0:*]
set xrange [0.5:*]
set xtics 1
set key top left
set xlabel "replicas behind nginx"
set ylabel "requests per second (sales)"
set offsets 0, 0.5, graph 0.1, 0
set title title

do for [target in "png svg"] {
    if (target eq "png") {
        set terminal pngcairo size 960,600 font "DejaVu Sans,10"
        set output png
    } else {
        set terminal svg size 960,600 dynamic font "DejaVu Sans,10" background "white"
        set output svg
    }
    plot csv using 1:2 with linespoints linewidth 2 pointtype 7 linecolor rgb "#3b75af" \
             title "redis (single Redis)", \
         csv using 1:3 with linespoints linewidth 2 pointtype 5 linecolor rgb "#2e8b57" \
             title "pg-atomic", \
         csv using 1:2:(sprintf("%.0f", $2)) with labels offset -2.5,-1 notitle, \
         csv using 1:3:(sprintf("%.0f", $3)) with labels offset 2.5,1 notitle, \
         cluster using 1:2 with points pointsize 2 pointtype 9 linecolor rgb "#c0392b" \
             title "redis, Redis Cluster", \
         cluster using 1:3 with points pointsize 2 pointtype 11 linecolor rgb "#e67e22" \
             title "pg-atomic, Redis Cluster"
    unset output
}
