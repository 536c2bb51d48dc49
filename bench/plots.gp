# The cold-start plots in docs/plots, from the tables models_bench writes beside them
# (docs/plots/models-<profile>-{modes,read,bursts}.tsv). Run by bench/coldstart:
#   gnuplot -e "profile='a100-pcie4'" bench/plots.gp
if (!exists("profile")) profile = 'a100-pcie4'
if (!exists("dir")) dir = 'docs/plots'
data(what) = sprintf('%s/models-%s-%s.tsv', dir, profile, what)
set terminal svg size 900,480 dynamic font 'sans,12' background '#ffffff'
set datafile separator "\t"
set key autotitle columnhead  # every table's first row names its columns
set key top left
set grid ytics

# First response of each model in each restore mode, against its bound (log scale: the
# fresh-context modes pay a context creation).
set output sprintf('%s/first-response-%s.svg', dir, profile)
set title sprintf('First response by restore mode (%s, modelled ms, median)', profile)
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set logscale y
set ylabel 'ms (log scale)'
set xtics rotate by -20 noenhanced
plot data('modes') using 2:xtic(1), '' using 3, '' using 4, '' using 5, '' using 6
unset logscale y
unset style data

# Latency against the bytes a request reads: phos follows its bound, eager pays for everything.
set output sprintf('%s/latency-vs-bytes-read-%s.svg', dir, profile)
set title sprintf('First response against bytes read (%s, modelled ms, median)', profile)
set xlabel 'bytes the request reads (MiB)'
set ylabel 'ms'
set xtics norotate
set autoscale
plot data('read') using 2:5 smooth unique with linespoints title 'bound max(B_{read}/W, E) + 5 ms', \
     '' using 2:3 with points pt 7 ps 1.2 title 'phos', \
     '' using 2:4 with points pt 5 ps 1.2 title 'eager'

# Simultaneous cold starts of different functions on one device.
set output sprintf('%s/concurrency-%s.svg', dir, profile)
set title sprintf('Simultaneous cold starts (%s)', profile)
set xlabel 'cold starts at once'
set ylabel 'first byte p99 (ms)'
set y2label 'link utilisation (%)'
set y2range [0:110]
set y2tics
set logscale x 2
plot data('bursts') using 1:3 with linespoints axes x1y1 title 'first byte p99', \
     '' using 1:($4*100) with linespoints axes x1y2 title 'link utilisation'
