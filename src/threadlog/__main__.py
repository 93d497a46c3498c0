from threadlog.cli import main

main()
