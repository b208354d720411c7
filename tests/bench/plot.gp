# gnuplot -e "dat='tests/bench/device-h200.dat'" tests/bench/plot.gp  ->  docs/performance.png
if (!exists("dat")) dat = 'tests/bench/device-h200.dat'
if (!exists("out")) out = 'docs/performance.png'
set terminal pngcairo size 900,560 noenhanced
set output out
set title "Rendezvous of N ranks on one 16-core machine (medians of 3, connects inside the timing)"
set xlabel "ranks"; set ylabel "seconds"
set logscale xy; set grid
set key left top
set xtics (1024, 4096, 16384)
plot dat using 1:2 with linespoints lw 2 title "rdzvd (fsync on)", \
     dat using 1:3 with linespoints lw 2 title "PyTorch TCPStore (libuv)", \
     dat using 1:4 with linespoints lw 2 title "floor (bare epoll server)"
