from stopdoctor.cli import main

main()
