# The checkpoint plot in docs/plots, from the table checkpoint_bench writes beside it
# (docs/plots/checkpoint-<profile>.tsv):
#   gnuplot -e "profile='a100-pcie4'" bench/checkpoint.gp
if (!exists("profile")) profile = 'a100-pcie4'
if (!exists("dir")) dir = 'docs/plots'
set terminal svg size 900,480 dynamic font 'sans,12' background '#ffffff'
set datafile separator "\t"
set key autotitle columnhead
set key top left
set grid ytics

# What a request during a checkpoint waits for beyond its usual latency, by mode and size (log
# scale: stop-the-world grows with the bytes, the soft modes with the point, the final stop and
# contention).
set output sprintf('%s/checkpoint-%s.svg', dir, profile)
set title sprintf('Stall a serving instance sees during a checkpoint (%s, modelled ms, median)', profile)
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set logscale y
set ylabel 'ms (log scale)'
plot sprintf('%s/checkpoint-%s.tsv', dir, profile) using 2:xtic(1), '' using 3, '' using 4
