# gnuplot tests/bench/plot.gp  ->  docs/performance.png
# dat: a compare.py --dat table (ranks, lean rdzvd, TCPStore, floor, librdzv, libzmq floor).
if (!exists("dat")) dat = 'tests/bench/device-h200-table.dat'
if (!exists("out")) out = 'docs/performance.png'
set terminal pngcairo size 900,560 noenhanced
set output out
set title "Rendezvous of N ranks on one 16-core machine (medians, connects inside the timing)"
set xlabel "ranks"; set ylabel "seconds"
set logscale xy; set grid
set key left top
set xrange [800:20000]
set xtics (1024, 4096, 16384)
plot dat using 1:5 with linespoints lw 3 title "rdzv through librdzv (default options)", \
     dat using 1:3 with linespoints lw 2 title "PyTorch TCPStore (libuv) through its client", \
     dat using 1:2 with linespoints lw 1 dt 2 title "rdzvd alone (lean simulator)", \
     dat using 1:4 with linespoints lw 1 dt 3 title "floor (bare epoll server, one listener)", \
     dat using 1:6 with linespoints lw 1 dt 4 title "libzmq floor (bare ROUTER shaped like rdzvd)"
