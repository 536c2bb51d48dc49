# The remote tier's plot in docs/plots, from the table remote_tier_bench writes beside it
# (docs/plots/remote_tier.tsv: one row per path, its effective rate, its time to the first chunk
# and its tier's number for the colour). remote_tier_bench runs it; by hand:
#   gnuplot bench/remote_tier.gp
if (!exists("dir")) dir = 'docs/plots'
table = sprintf('%s/remote_tier.tsv', dir)
set terminal svg size 1100,520 dynamic font 'sans,12' background '#ffffff'
set output sprintf('%s/remote_tier.svg', dir)
set datafile separator "\t"
unset key
set grid ytics
set style fill solid 0.8 border -1
set boxwidth 0.7
set xtics rotate by -40 noenhanced nomirror
set autoscale xfix
# Import from the bucket, fetch only, disk tier, DRAM tier.
colour(tier) = tier == 1 ? 0x4477aa : tier == 2 ? 0x66ccee : tier == 3 ? 0xccbb44 : 0xee6677
# Log scales: the tiers lie orders of magnitude apart. Each panel spans its own data, with room
# above the tallest bar for its label.
set logscale y
set offsets 0.7, 0.7, 0, 0
stats table using 2 nooutput
rate_min = STATS_min; rate_max = STATS_max
stats table using 3 nooutput
first_min = STATS_min; first_max = STATS_max
set rmargin 12
set multiplot layout 1,2 title 'Snapshot restore by tier: a loopback s3rver bucket vs the disk and DRAM tiers (median)'
set title 'effective rate (MB/s, log scale)'
set yrange [rate_min / 2 : rate_max * 3]
plot table using 0:2:(colour($4)):xtic(1) with boxes linecolor rgb variable, \
     '' using 0:2:(sprintf('%.0f', $2)) with labels offset 0,0.6 font ',10'
set title 'first chunk in place (ms, log scale)'
set yrange [first_min / 2 : first_max * 3]
plot table using 0:3:(colour($4)):xtic(1) with boxes linecolor rgb variable, \
     '' using 0:3:(sprintf($3 < 10 ? '%.1f' : '%.0f', $3)) with labels offset 0,0.6 font ',10'
unset multiplot
