# chart.gp - the load report's chart, drawn by loadtest/run from its CSV:
#
#   gnuplot -e "csv='results.csv'; png='chart.png'; svg='chart.svg'; title='...'" chart.gp
#
# Two panels, one bar group per row of the report (labelled "mode xN replicas"):
#   top:    throughput (req/s through HTTP) beside the mode's serial ceiling (one client,
#           no HTTP: bench/ceiling_bench.c);
#   bottom: units oversold: sold minus what the stock gave up. 0 is the only right answer.
# The columns are read by name from the CSV header, so the driver may add columns freely.

if (!exists("title")) title = "stock deduction under load"

set datafile separator ","
set datafile columnheaders
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set grid ytics
set yrange [0:*]
set xtics nomirror
set key outside bottom center horizontal # under the axis, never over the bars
set offsets 0, 0, graph 0.12, 0        # headroom for the figures over the bars

do for [target in "png svg"] {
    if (target eq "png") {
        set terminal pngcairo size 960,720 font "DejaVu Sans,10"
        set output png
    } else {
        set terminal svg size 960,720 dynamic font "DejaVu Sans,10" background "white"
        set output svg
    }
    set multiplot layout 2,1 title title
    set ylabel "requests per second"
    set title "throughput, and the mode's serial ceiling (one client, no HTTP)"
    plot csv using (column("rps")):xtic(strcol("label")) title "req/s through HTTP" \
             linecolor rgb "#3b75af", \
         ""  using (column("ceiling_rps")) title "serial ceiling" linecolor rgb "#a6a6a6"
    set ylabel "units"
    set title "oversold: units sold that the stock never gave up"
    # The figure over each bar, so that a 0 (no bar at all) reads as a measured 0.
    plot csv using (column("oversold")):xtic(strcol("label")) title "oversold" \
             linecolor rgb "#c0392b", \
         ""  using 0:(column("oversold")):(sprintf("%d", column("oversold"))) \
             with labels offset 0,0.8 notitle
    unset multiplot
    unset output
}
