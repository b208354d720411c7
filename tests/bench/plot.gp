# gnuplot tests/bench/plot.gp  ->  docs/performance.png
# dat: a compare.py --dat table (the sharded rdzvd, TCPStore, the floor);
# before: the same table from the single-ROUTER rdzvd, drawn for comparison.
if (!exists("dat")) dat = 'tests/bench/device-h200-sync.dat'
if (!exists("before")) before = 'tests/bench/device-h200-after.dat'
if (!exists("out")) out = 'docs/performance.png'
set terminal pngcairo size 900,560 noenhanced
set output out
set title "Rendezvous of N ranks on one 16-core machine (medians, connects inside the timing)"
set xlabel "ranks"; set ylabel "seconds"
set logscale xy; set grid
set key right bottom
set xrange [800:20000]
set xtics (1024, 4096, 16384)
plot dat using 1:2 with linespoints lw 2 title "rdzvd, 8 shards (fsync on)", \
     before using 1:2 with linespoints lw 1 dt 2 title "rdzvd, one ROUTER (before sharding)", \
     dat using 1:3 with linespoints lw 2 title "PyTorch TCPStore (libuv)", \
     dat using 1:4 with linespoints lw 2 title "floor (bare epoll server, one listener)"
