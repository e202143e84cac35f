from tracelab.cli import main

main()
